"""`python -m trainer fit|eval`: train a model from a CSV file, or evaluate one on a CSV file.

    python -m trainer fit TRAIN.csv --out MODEL_DIR [--workdir D] [--learners K] [--device D]
                          [--language L] [--multi-label]
        K learner processes on the embedded parameter server (0 = one per core, the
        default; 1 = in-process). --language (default en): English trains on the shared
        sentence encoder beside the n-grams (trainer.hparams.encoder_for), other languages on
        the n-grams alone. A live progress line on stderr, a JSON summary on stdout. Checkpoints go to
        D (default MODEL_DIR.ckpt beside MODEL_DIR); rerunning an interrupted fit (Ctrl-C,
        a crash) resumes from them. The default workdir is removed after success.
        --multi-label: the rows of one text are one example with all their labels.
    python -m trainer eval MODEL_DIR TEST.csv
        One JSON line: {"accuracy": .., "macro_f1": .., "n": ..}; for a multi-label model
        (TEST.csv's rows grouped by text likewise) {"micro_f1", "macro_f1", "micro_precision",
        "micro_recall", "macro_precision", "macro_recall", "hamming_loss", "subset_accuracy",
        "n", "threshold"}.

Exit status: 0 success, 1 a trainer error (message on stderr), 130 stopped by Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from trainer.data import LabelledData, read_labelled_csv
from trainer.encoder import SentenceEncoder, shared_encoder
from trainer.engine import train
from trainer.errors import TrainerError, TrainingStopped
from trainer.evaluate import classification_report, multilabel_report
from trainer.hparams import encoder_for
from trainer.inference import LoadedModel
from trainer.progress import Progress

SUMMARY_KEYS = ("accuracy", "macro_f1", "n", "evaluated_on")
MULTI_LABEL_SUMMARY_KEYS = (
    "micro_f1",
    "macro_f1",
    "hamming_loss",
    "subset_accuracy",
    "n",
    "threshold",
    "evaluated_on",
)


def _print_progress(progress: Progress) -> None:
    sys.stderr.write(_progress_line(progress))
    sys.stderr.flush()


def _progress_line(progress: Progress) -> str:
    loss = "-" if progress.loss is None else f"{progress.loss:.4f}"
    eta = "-" if progress.eta_seconds is None else f"{progress.eta_seconds:.0f}s"
    return (
        f"\r{progress.phase:<10} epoch {progress.epoch} step {progress.step}/{progress.total_steps} "
        f"loss {loss} {progress.samples_per_second:,.0f} samples/s K={progress.learners} ETA {eta}   "
    )


def _fit(args: argparse.Namespace) -> int:
    out_dir = Path(args.out)
    default_workdir = args.workdir is None
    workdir = out_dir.with_name(out_dir.name + ".ckpt") if default_workdir else Path(args.workdir)
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        result = train(
            read_labelled_csv(Path(args.train_csv)),
            workdir=workdir,
            out_dir=out_dir,
            learners=args.learners,
            device=args.device,
            on_progress=_print_progress,
            should_stop=lambda: stop_requested,
            multi_label=args.multi_label,
            encoder=_encoder(args.language),
        )
    except TrainingStopped as exc:
        sys.stderr.write(f"\n{exc}; run the same command again to resume\n")
        return 130
    except (TrainerError, OSError) as exc:  # OSError: a CSV not there, an out folder not writable
        sys.stderr.write(f"\nerror: {exc}\n")
        return 1
    sys.stderr.write("\n")
    if default_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    metrics = result.metrics
    keys = MULTI_LABEL_SUMMARY_KEYS if args.multi_label else SUMMARY_KEYS
    print(
        json.dumps(
            {
                "model_dir": str(result.model_dir),
                "applied_updates": result.applied_updates,
                "epochs": result.epochs,
                "resumed": result.resumed,
                "learners": result.learners,
                "ps": {k: result.ps[k] for k in ("pushed", "applied")},
                "train_seconds": round(result.train_seconds, 3),
                "metrics": {k: metrics[k] for k in keys},
            }
        )
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    try:
        model = LoadedModel.load(Path(args.model_dir))
        data = read_labelled_csv(Path(args.test_csv))
    except (TrainerError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    print(json.dumps(_multilabel_scores(model, data) if model.multi_label else _scores(model, data)))
    return 0


def _scores(model: LoadedModel, data: LabelledData) -> dict[str, object]:
    predicted = [scores[0][0] for scores in model.classify(data.texts)]
    report = classification_report(data.labels, predicted)
    return {"accuracy": report["accuracy"], "macro_f1": report["macro_f1"], "n": report["n"]}


def _multilabel_scores(model: LoadedModel, data: LabelledData) -> dict[str, object]:
    """The multi-label report without per-class figures, on the test rows grouped by text."""
    examples = data.grouped()
    predicted = [model.labels_of(scores) for scores in model.classify(examples.texts)]
    report = multilabel_report(examples.label_sets, predicted)
    del report["per_class"]
    return {**report, "threshold": model.threshold}


def _encoder(language: str) -> SentenceEncoder | None:
    """The shared sentence encoder a classifier in ``language`` trains on (None: n-grams)."""
    spec = encoder_for(language)
    return shared_encoder(spec.name) if spec is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description="Train or evaluate a taas model.")
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("fit", help="train a model from a CSV with header text,label")
    fit.add_argument("train_csv")
    fit.add_argument("--out", required=True, help="model directory to write")
    fit.add_argument("--workdir", help="checkpoint directory (default: MODEL_DIR.ckpt)")
    fit.add_argument(
        "--learners", type=int, default=0, help="learner processes K (default 0: one per core; 1: in-process)"
    )
    fit.add_argument(
        "--device",
        choices=("cpu", "cuda", "auto"),
        default="cpu",
        help="cpu (default), or cuda: one learner replaying its steps as CUDA graphs (under Adam, or "
        "with K > 1, K learners as CUDA streams sharing one GPU)",
    )
    fit.add_argument(
        "--language",
        default="en",
        help="the texts' language, an NLC code (default en: on the sentence encoder; others: n-grams alone)",
    )
    fit.add_argument(
        "--multi-label",
        action="store_true",
        help="one example per distinct text with all its rows' labels; one sigmoid per class",
    )
    fit.set_defaults(run=_fit)
    evaluate = commands.add_parser("eval", help="accuracy of a model on a CSV with header text,label")
    evaluate.add_argument("model_dir")
    evaluate.add_argument("test_csv")
    evaluate.set_defaults(run=_eval)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
