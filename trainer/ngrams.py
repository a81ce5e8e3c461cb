"""A text's words and tokens, their n-grams, and the n-grams' stable hashes.

Words and tokens are runs of letters, digits and underscores in the lower-cased NFKC text,
one pipeline for every language, without a language switch. The scripts written without
spaces between words (Han and kana; hangul too, whose spacing varies from writer to writer)
have no words to find: there each character is a word, so word 1..2-grams are character
uni- and bigrams, the usual features of unsegmented text, and a whole run is one token.
Elsewhere words and tokens are the same runs. Arabic's optional vowel marks and tatweel are
dropped, so vocalised and bare spellings are one word, and so are variation selectors.

Word n-grams are runs of 1..n consecutive words; character n-grams are the substrings of each
token padded as ``<token>`` (word-boundary aware, like scikit-learn's ``char_wb``). Every
n-gram is hashed with CRC-32, stable across processes and machines, unlike Python's ``hash()``.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Sequence

# Letters and digits of the scripts written without spaces between words: Hangul Jamo, CJK
# iteration marks and numerals, kana, Bopomofo, Hangul syllables, CJK ideographs (NFKC has
# already folded half-width and compatibility forms into these).
_UNSEGMENTED = (
    "\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c\u3041-\u3096"
    "\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3105-\u312f\u31a0-\u31bf\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7fb\uf900-\ufaff"
    "\U0001b000-\U0001b16f\U00020000-\U000323af"
)
_UNSEGMENTED_CHAR = re.compile(f"[{_UNSEGMENTED}]")
# Words and tokens are runs of word characters (\w). With those scripts in a text, tokens (the
# units of character n-grams) are cut where they begin and end, and each of their characters
# is a word (a unit of word n-grams); the slower pattern runs only on such texts.
_RUN = re.compile(r"\w+")
_TOKEN = re.compile(f"[{_UNSEGMENTED}]+|[^\\W{_UNSEGMENTED}]+")
# The same runs in Latin-1 text, a quicker way: its non-word characters become spaces to split on.
_LATIN1_RUNS = bytes(code if _RUN.fullmatch(chr(code)) else ord(" ") for code in range(256))
# Dropped before tokenising: Arabic harakat (tanwin, short vowels, shadda, sukun, ...),
# superscript alef and tatweel, written or left out at the writer's whim, and variation
# selectors, which choose a glyph; for \w either would split a word in two.
_DROPPED = re.compile("[\u0640\u064b-\u065f\u0670\ufe00-\ufe0f\U000e0100-\U000e01ef]")
# Joins a batch for one normalisation: NFKC and lower() keep it, never merge it with its
# neighbours (a starter that composes with nothing) and it is neither cased nor case-ignorable,
# so Σ's final form is chosen as at the end of a text.
_SEPARATOR = "\x00"


def tokenize(text: str) -> tuple[list[str], list[str]]:
    """A text's words (for word n-grams) and tokens (for character n-grams): lower-cased NFKC
    runs of letters, digits and underscores, which are both, except that a run of Han, kana or
    hangul is a token of its own and each of its characters a word. Arabic's optional vowel
    marks and tatweel, and variation selectors, are dropped."""
    return _split(_fold(text))


def tokenize_all(texts: Sequence[str]) -> list[tuple[list[str], list[str]]]:
    """tokenize() of each text, folding the batch as one string joined by _SEPARATOR; a batch
    in which some text holds the separator itself is folded text by text."""
    folded = _fold(_SEPARATOR.join(texts)).split(_SEPARATOR)
    if len(folded) != len(texts):
        folded = list(map(_fold, texts))
    return list(map(_split, folded))


def _fold(text: str) -> str:
    """NFKC, lower-cased."""
    return unicodedata.normalize("NFKC", text).lower()


def _split(folded: str) -> tuple[list[str], list[str]]:
    """tokenize() of a text already folded."""
    try:
        latin1 = folded.encode("latin-1")
    except UnicodeEncodeError:
        return _split_unicode(folded)
    # Latin-1 (most text is ASCII) has nothing to drop and no unsegmented script: just the runs
    runs = latin1.translate(_LATIN1_RUNS).decode("latin-1").split()
    return runs, runs


def _split_unicode(folded: str) -> tuple[list[str], list[str]]:
    folded = _DROPPED.sub("", folded)
    if _UNSEGMENTED_CHAR.search(folded):
        tokens = _TOKEN.findall(folded)
        words: list[str] = []
        for token in tokens:
            if _UNSEGMENTED_CHAR.match(token):
                words.extend(token)
            else:
                words.append(token)
        return words, tokens
    runs = _RUN.findall(folded)
    return runs, runs


def stable_hash(gram: str, group: int) -> int:
    """CRC-32 of the group tag and the UTF-8 n-gram: identical in every process."""
    return zlib.crc32(gram.encode("utf-8"), group + 1)


def word_grams(words: list[str], longest: int) -> list[str]:
    """The word n-grams of ``words``, 1..``longest`` words each: the unigrams, then the bigrams, ..."""
    grams = words[:] if longest >= 1 else []  # unigrams need no join
    shorter = words
    for n in range(2, longest + 1):
        shorter = list(map(" ".join, zip(shorter, words[n - 1 :], strict=False)))  # + the next word
        grams += shorter
    return grams


def char_grams(token: str, shortest: int, longest: int) -> list[str]:
    """The character n-grams of ``token`` padded as ``<token>``, ``shortest``..``longest`` long."""
    padded = f"<{token}>"
    return [padded[i : i + n] for n in range(shortest, longest + 1) for i in range(len(padded) - n + 1)]
