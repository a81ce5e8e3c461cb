"""``GET /v1/datasets/{id}/report`` and the upload's reply with its warnings (extension): the
shape of :func:`service.catalogue.dataset_report.build_report`'s dict."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.api.schemas import DatasetInfo


class ClassRows(BaseModel):
    """A class and its rows."""

    class_name: str
    rows: int


class SmallClasses(BaseModel):
    """Classes with fewer than ``threshold`` rows: how many, and the smallest of them (at most 10)."""

    threshold: int
    count: int
    classes: list[ClassRows]


class DuplicateRow(BaseModel):
    """A row (text and class) that the dataset has ``times`` times."""

    text: str
    class_name: str
    times: int


class ExactDuplicates(BaseModel):
    """Rows repeating an earlier row, the same text and class (``rows`` counts the repeats), and
    the most repeated ones."""

    rows: int
    examples: list[DuplicateRow]


class NearDuplicateGroup(BaseModel):
    """Distinct texts that read the same once normalised (at most 3 shown)."""

    texts: list[str]


class NearDuplicates(BaseModel):
    """Texts that differ from another only in case, punctuation, white space or Unicode form
    (NFKC): how many besides the first of each group, and a few groups."""

    texts: int
    examples: list[NearDuplicateGroup]


class MultiLabelText(BaseModel):
    """A text and the classes it is given."""

    text: str
    classes: list[str]


class MultiLabelTexts(BaseModel):
    """Texts given two or more classes: a conflict in single-label data, the point of multi-label
    data. Warned of only when they are a small minority (``share`` of the distinct texts up to
    0.1), which looks like a mistake."""

    texts: int
    share: float
    examples: list[MultiLabelText]


class HeldOutMistake(BaseModel):
    """A held-out row of ``class_name`` that the quick model took for ``taken_for``."""

    text: str
    class_name: str
    taken_for: str


class ConfusablePair(BaseModel):
    """Two classes and how many of each one's held-out rows (of ``evaluated_a``, ``evaluated_b``)
    the quick model gave to the other."""

    class_a: str
    class_b: str
    a_as_b: int
    b_as_a: int
    evaluated_a: int
    evaluated_b: int
    examples: list[HeldOutMistake]


class ConfusableClasses(BaseModel):
    """A nearest-centroid model on word and character n-gram TF-IDF, cross-validated over
    ``folds`` stratified folds on at most 4,000 rows: its held-out ``accuracy`` and the five
    pairs of classes it confused most."""

    rows_evaluated: int
    folds: int
    accuracy: float | None
    pairs: list[ConfusablePair]


class DatasetReport(BaseModel):
    """``GET /v1/datasets/{id}/report``: what in a dataset's rows (one per text and class) may
    hurt the classifiers trained on it, computed once at upload."""

    version: int
    rows: int
    texts: int = Field(description="Distinct texts.")
    classes: int
    class_counts: list[ClassRows] = Field(description="Every class and its rows, largest first.")
    imbalance: float | None = Field(description="The largest class's rows over the smallest's.")
    small_classes: SmallClasses
    exact_duplicates: ExactDuplicates
    near_duplicates: NearDuplicates
    multi_label_texts: MultiLabelTexts
    confusable_classes: ConfusableClasses
    dropped: int = Field(
        description="Always 0: taas refuses an upload with a bad row (a 400 naming it) rather than drop it."
    )
    warnings: list[str]


class DatasetCreated(DatasetInfo):
    """``POST /v1/datasets``'s reply: the dataset, and its report's warnings (none for clean data)."""

    warnings: list[str]
