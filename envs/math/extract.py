"""The answer extractor: read a final numeric answer out of model text, never run it.

**The required form** (the ``format`` cost) is GSM8K's: a line ``#### <number>``. The
*last* ``####`` marker of the completion counts, and what follows it on its line must be
exactly one number literal, optionally wrapped in ``$`` (currency or LaTeX) and followed
by a period::

    #### 42        #### -3.5      #### 1,234     #### 7/12     #### \\frac{7}{12}     #### $12.50

Text after that line is allowed (a model that keeps talking after its answer is judged
by its length cost, not by its format).

**The lenient reading** (the default for correctness, so that ``format`` is a constraint
and not part of the reward) tries, in order, and takes the first that yields a number:

1. the last ``####`` marker, with the rest of its line read leniently (units and number
   words allowed: ``#### forty-two apples``);
2. the last ``\\boxed{...}``;
3. the last phrase ``answer is``, ``answer:``, ``answer =`` (also ``result``, ``total``);
4. the last number literal anywhere in the text.

In rules 1-3 the number must stand alone: an operator, a digit or a bracket after it
(``#### 9^2``, ``#### 9 + 1``, ``#### 9!``, ``#### 9^9^9^9``, ``\\boxed{3 * 4}``), an operator
word (``#### 9 plus 1``, ``9 squared``, ``9 x 9``, ``9 times 2``, ``9 to the power 2``, ``9 mod
2``, ``9 over 10``) or a comma or colon before a digit (``#### 9,5``, ``#### 9:30``) makes the
text an expression, which is read as no answer (the chain stops: not its first number,
nor a later rule's). In rules 1 and 2 the rest of the ``####`` line, or of the box, holds
no other digit at all (``#### 9 apples and 2 pears`` is no answer); words and units may
follow the number (``#### 42 apples``, ``#### 12 dollars.``).

Number literals: integers, decimals, thousands separators (``1,234,567``), a sign
(``-``, ``+``, U+2212), fractions ``a/b`` and ``\\frac{a}{b}`` (exact, as
:class:`fractions.Fraction`), scientific notation with ``|exponent| <= 100``, and number
words up to the billions (``forty-two``, ``one hundred and five``, ``minus seven``).
Not read: mixed numbers (``1 1/2`` is read as ``1/2`` by rule 4), percentages as
fractions (``50%`` is 50), roman numerals.

**Safety.** Nothing here evaluates model text: only compiled regular expressions (no
nested quantifiers, so no catastrophic backtracking), ``int`` on ASCII digit strings and
``Fraction`` on integers. Every public function returns a ``Fraction`` or ``None`` and
never raises: a literal with more than :data:`MAX_DIGITS` digits, a zero denominator or a
huge exponent is "no answer"; only the last :data:`MAX_SCAN_CHARS` characters of a text
are read (a final answer is at the end), which bounds the time on any input.

>>> extract_answer("7 + 5 = 12\\n#### 12")
Fraction(12, 1)
>>> extract_answer("The answer is 12.") is None          # not the required form
True
>>> extract_answer("The answer is 12.", mode="lenient")
Fraction(12, 1)
>>> find_answer("so \\\\boxed{3/4}").form
'boxed'
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from math import gcd

__all__ = [
    "Answer",
    "MAX_DIGITS",
    "MAX_EXPONENT",
    "MAX_SCAN_CHARS",
    "REQUIRED_FORM",
    "extract_answer",
    "find_answer",
    "format_answer",
    "has_required_form",
    "is_reduced_fraction",
    "parse_number",
]

#: A number literal with more digits than this is "no answer" (Python refuses int() of
#: more than 4300 digits by default; no task has answers anywhere near this size).
MAX_DIGITS = 1000
#: Scientific notation with a larger exponent magnitude is "no answer" (10**10**9 would hang).
MAX_EXPONENT = 100
#: Only the last this many characters of a text are read.
MAX_SCAN_CHARS = 20_000
#: The required form, for messages and docs.
REQUIRED_FORM = "a final line '#### <number>'"

# --- number literals -------------------------------------------------------------------
# A sign counts only where it cannot be a binary operator: not after a letter, digit or
# closing bracket ("5-3" is 5 and 3, not 5 and -3).
_SIGN = r"(?:(?<![0-9A-Za-z)\]}])(?P<NAME>[-+\u2212]))?"
# Integer part: grouped thousands or a plain digit run. Each alternative is a single loop
# over disjoint characters, so the engine backtracks at most linearly.
_INT = r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)"
_DEC = rf"(?:{_INT}(?:\.[0-9]+)?|\.[0-9]+)"
_EXP = r"(?:[eE](?P<NAME>[-+]?[0-9]+))?"
_NUM = _SIGN.replace("NAME", "sign") + rf"(?P<num>{_DEC})" + _EXP.replace("NAME", "exp")
_FRAC = (
    _SIGN.replace("NAME", "fsign")
    + rf"(?P<fnum>{_DEC})[ \t]*/[ \t]*(?P<fden>{_DEC})(?![0-9])"
)
_LATEX_FRAC = (
    _SIGN.replace("NAME", "lsign")
    + r"\\[dt]?frac[ \t]*\{[ \t]*(?P<lnum>[-+\u2212]?[ \t]*"
    + _DEC
    + r")[ \t]*\}[ \t]*\{[ \t]*(?P<lden>[-+\u2212]?[ \t]*"
    + _DEC
    + r")[ \t]*\}"
)
# Alternation order matters: a fraction must win over its numerator alone.
_LITERAL = re.compile(rf"{_LATEX_FRAC}|{_FRAC}|{_NUM}")

# --- number words ----------------------------------------------------------------------
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_SCALES) | {"hundred", "and", "a", "minus", "negative"}
_WORD = re.compile(r"[A-Za-z]+")
# At most this many words are read as one number (bounds the work on word soup).
_MAX_NUMBER_WORDS = 24

# --- answer markers --------------------------------------------------------------------
_HASH = re.compile(r"####")
_BOXED = re.compile(r"\\boxed[ \t]*\{")
_PHRASE = re.compile(r"\b(?:final answer|answer|result|total)\b[ \t]*(?:is|:|=|was|will be)[ \t]*:?[ \t]*", re.IGNORECASE)
# The strict form: after the marker, one literal, optional $ around it, optional period.
_STRICT_TAIL = re.compile(
    r"[ \t]*\$?[ \t]*(?P<lit>(?:" + _LATEX_FRAC + "|" + _FRAC + "|" + _NUM + r"))[ \t]*\$?[ \t]*\.?[ \t]*(?:\r?\n|$)"
)

_TRANSLATE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00a0": " ", "\u202f": " ", "\u2009": " "})


@dataclass(frozen=True)
class Answer:
    """What :func:`find_answer` read.

    Attributes:
        value: the number, exact; None when the text has no readable answer.
        form: how it was found: ``"hash"`` (the required form), ``"hash_lenient"`` (a
            ``####`` line with units or words), ``"boxed"``, ``"phrase"``,
            ``"last_number"``; None with no answer.
        literal: the matched text of the number (for checks on its spelling, such as
            "in lowest terms").
    """

    value: Fraction | None
    form: str | None
    literal: str = ""

    @property
    def required_form(self) -> bool:
        """Whether the answer is in the required form (``#### <number>``)."""
        return self.form == "hash" and self.value is not None


_NO_ANSWER = Answer(None, None, "")


def _digits_ok(s: str) -> bool:
    return sum(ch.isdigit() for ch in s) <= MAX_DIGITS


def _decimal(text: str) -> Fraction | None:
    """An unsigned decimal literal (digits, optional grouping commas, optional fraction)."""
    s = text.replace(",", "")
    if not s or not _digits_ok(s):
        return None
    whole, _, frac = s.partition(".")
    # Only ASCII digits reach here (the patterns use [0-9]), so int() cannot surprise us.
    if not (whole or frac) or not (whole + frac).isascii() or not (whole + frac).isdigit():
        return None
    if frac:
        return Fraction(int(whole or "0") * 10 ** len(frac) + int(frac), 10 ** len(frac))
    return Fraction(int(whole))


def _signed(text: str) -> Fraction | None:
    s = text.replace(" ", "").replace("\t", "").replace("\u2212", "-")
    neg = s.startswith("-")
    s = s.lstrip("+-")
    value = _decimal(s)
    if value is None:
        return None
    return -value if neg else value


def _from_match(m: re.Match[str]) -> Fraction | None:
    """The value of one :data:`_LITERAL` match, or None (zero denominator, too many digits)."""
    groups = m.groupdict()
    if groups.get("lnum") is not None:
        num, den, sign = _signed(groups["lnum"]), _signed(groups["lden"]), groups.get("lsign")
    elif groups.get("fnum") is not None:
        num, den, sign = _decimal(groups["fnum"]), _decimal(groups["fden"]), groups.get("fsign")
    else:
        value = _decimal(groups["num"])
        if value is None:
            return None
        exp = groups.get("exp")
        if exp is not None:
            if len(exp) > 8:  # an exponent of a billion or more: no answer (and no int() of a huge string)
                return None
            e = int(exp)
            if abs(e) > MAX_EXPONENT:
                return None
            value = value * Fraction(10) ** e
        return -value if groups.get("sign") in ("-", "\u2212") else value
    if num is None or den is None or den == 0:
        return None
    value = num / den
    return -value if sign in ("-", "\u2212") else value


def _words_value(words: list[str]) -> Fraction | None:
    """English number words (already lower-cased, hyphens split) to a value, or None."""
    if not words:
        return None
    neg = False
    if words[0] in ("minus", "negative"):
        neg, words = True, words[1:]
    if words and words[0] == "a" and len(words) > 1 and words[1] in ("hundred", "thousand", "million", "billion"):
        words = ["one", *words[1:]]  # "a hundred"
    total, current, seen = 0, 0, False
    for w in words:
        if w == "and":
            continue
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in _SCALES:
            total += max(current, 1) * _SCALES[w]
            current = 0
        else:
            return None
        seen = True
    if not seen:
        return None
    value = Fraction(total + current)
    return -value if neg else value


def _leading_words(text: str) -> tuple[Fraction | None, str]:
    """Number words at the start of ``text`` (after spaces); ``(value, literal)``."""
    words: list[str] = []
    end = 0
    pos = 0
    for m in _WORD.finditer(text):
        gap = text[pos:m.start()]
        # Words of one number are separated by spaces or hyphens only.
        if gap.strip(" \t-") or len(words) >= _MAX_NUMBER_WORDS:
            break
        w = m.group(0).lower()
        if w not in _NUMBER_WORDS:
            break
        words.append(w)
        end, pos = m.end(), m.end()
    while words and words[-1] in ("and", "a", "minus", "negative"):
        words.pop()  # "forty and" -> forty; a lone "a" is not a number
    value = _words_value(words)
    return value, (text[:end].strip() if value is not None else "")


def _leading_number(text: str) -> tuple[Fraction | None, str]:
    """The number at the start of ``text`` (after spaces, ``$`` and ``\\(``), literal or words."""
    s = text.lstrip(" \t$")
    if s.startswith("\\("):
        s = s[2:].lstrip(" \t$")
    m = _LITERAL.match(s)
    if m is not None:
        return _from_match(m), m.group(0)
    return _leading_words(s)


# After a final answer's number only units or words may follow: an operator (a sign or an
# operator word), another digit, a bracket, or a comma or colon before a digit makes the line
# an expression ("#### 9^2", "#### 9 + 1", "#### 9!", "#### 9 plus 1", "#### 9,5"), which is
# no answer (not its first number).
_EXPRESSION_TAIL = re.compile(
    r"[ \t]*(?:[\^*\u00d7\u00b7+\-/!=(\[{<>]|[0-9]|[.,:][ \t]*[0-9]"
    r"|(?:plus|minus|times|x|multiplied|divided|over|squared|cubed|to[ \t]+the|raised|mod|modulo|factorial)\b)",
    re.IGNORECASE,
)


def _answer_alone(content: str, digits_after: bool = True) -> tuple[Fraction | None, str, bool]:
    """``(value, literal, expression)``: the number at the start of ``content`` when the rest
    is no expression (units and words may follow it; with ``digits_after`` False, no other
    digit anywhere in the rest); ``expression`` when a number starts an expression (then no
    value: the answer is not a number)."""
    value, literal = _leading_number(content)
    if value is None:
        return None, "", False
    start = content.find(literal)
    rest = content[start + len(literal):] if start >= 0 else ""
    if _EXPRESSION_TAIL.match(rest) or (not digits_after and _DIGIT.search(rest) is not None):
        return None, "", True
    return value, literal, False


def _line_after(text: str, end: int) -> str:
    nl = text.find("\n", end)
    return text[end:] if nl < 0 else text[end:nl]


_DIGIT = re.compile(r"[0-9]")


def _last_literal(text: str) -> Answer:
    """The last readable number literal. No literal spans a newline, so lines are read
    from the end and only the last line holding a readable literal is fully scanned."""
    end = len(text)
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        if _DIGIT.search(text, start, end) is not None:
            for m in reversed(list(_LITERAL.finditer(text[start:end]))):
                value = _from_match(m)
                if value is not None:
                    return Answer(value, "last_number", m.group(0))
        end = start - 1
    return _NO_ANSWER


def _boxed_content(text: str, start: int) -> str:
    """The content of ``\\boxed{`` starting at ``start`` up to the matching brace (depth <= 8)."""
    depth, i = 1, start
    limit = min(len(text), start + 200)
    while i < limit:
        ch = text[i]
        if ch == "{":
            depth += 1
            if depth > 8:
                return ""
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return ""


def _normalize(text: str) -> str:
    if len(text) > MAX_SCAN_CHARS:
        text = text[-MAX_SCAN_CHARS:]
    # NFKC turns full-width digits and similar look-alikes into ASCII; cheap at this size.
    return unicodedata.normalize("NFKC", text).translate(_TRANSLATE)


def _find_answer(text: str) -> Answer:
    text = _normalize(text)
    # 1. The last #### marker: strict form, else its line read leniently.
    last_hash = None
    for last_hash in _HASH.finditer(text):
        pass
    if last_hash is not None:
        end = last_hash.end()
        # "#####" is not a marker followed by "#": skip any extra hashes.
        while end < len(text) and text[end] == "#":
            end += 1
        m = _STRICT_TAIL.match(text, end)
        if m is not None:
            lit = _LITERAL.match(m.group("lit"))
            value = _from_match(lit) if lit is not None else None
            if value is not None:
                return Answer(value, "hash", m.group("lit"))
        value, literal, expression = _answer_alone(_line_after(text, end), digits_after=False)
        if value is not None:
            return Answer(value, "hash_lenient", literal)
        if expression:  # a final answer that is an expression is no answer: the chain stops
            return _NO_ANSWER
    # 2. The last \boxed{...}.
    last_box = None
    for last_box in _BOXED.finditer(text):
        pass
    if last_box is not None:
        content = _boxed_content(text, last_box.end())
        value, literal, expression = _answer_alone(content, digits_after=False)
        if value is not None:
            return Answer(value, "boxed", literal)
        if expression:
            return _NO_ANSWER
    # 3. The last "answer is ..." phrase.
    last_phrase = None
    for last_phrase in _PHRASE.finditer(text):
        pass
    if last_phrase is not None:
        value, literal, expression = _answer_alone(_line_after(text, last_phrase.end()))
        if value is not None:
            return Answer(value, "phrase", literal)
        if expression:
            return _NO_ANSWER
    # 4. The last number literal anywhere.
    return _last_literal(text)


def find_answer(text: object) -> Answer:
    """Read the final answer of ``text`` (the lenient chain of the module docstring).

    Never raises: a non-string, or anything unexpected, is "no answer".
    """
    if not isinstance(text, str):
        return _NO_ANSWER
    try:
        return _find_answer(text)
    except Exception:  # noqa: BLE001 - the contract is "never raises"; the tests hunt for this path
        return _NO_ANSWER


def extract_answer(text: object, mode: str = "strict") -> Fraction | None:
    """The final answer of ``text`` as a ``Fraction``, or None.

    Args:
        text: model output (anything; a non-string is "no answer").
        mode: ``"strict"``: only the required form ``#### <number>`` counts;
            ``"lenient"``: the whole chain of the module docstring.
    """
    answer = find_answer(text)
    if mode == "strict":
        return answer.value if answer.required_form else None
    if mode == "lenient":
        return answer.value
    raise ValueError(f"mode={mode!r}; choose 'strict' or 'lenient'")


def has_required_form(text: object) -> bool:
    """Whether ``text`` ends its answer in the required form (:data:`REQUIRED_FORM`)."""
    return find_answer(text).required_form


def parse_number(text: object, allow_words: bool = True) -> Fraction | None:
    """``text`` as a number when the whole of it (stripped, ``$`` removed) is one literal.

    >>> parse_number("-1,234.5")
    Fraction(-2469, 2)
    >>> parse_number("forty-two")
    Fraction(42, 1)
    >>> parse_number("42 apples") is None
    True
    """
    if not isinstance(text, str):
        return None
    try:
        s = _normalize(text).strip().strip("$").strip()
        if not s:
            return None
        m = _LITERAL.fullmatch(s)
        if m is not None:
            return _from_match(m)
        if allow_words and len(s) <= 400 and all(w.lower() in _NUMBER_WORDS for w in _WORD.findall(s)):
            value, literal = _leading_words(s)
            return value if literal == s.rstrip(" .") else None
        return None
    except Exception:  # noqa: BLE001 - never raises, as above
        return None


def is_reduced_fraction(literal: str) -> bool:
    """Whether ``literal`` spells a fraction in lowest terms (``a/b`` or ``\\frac{a}{b}``, or an integer).

    Used by tasks whose answer must be *written* in lowest terms (fraction simplification),
    where ``Fraction`` equality alone would accept ``2/4`` for ``1/2``.
    """
    try:
        m = _LITERAL.fullmatch(_normalize(literal).strip())
        if m is None:
            return False
        g = m.groupdict()
        num_s = g.get("lnum") if g.get("lnum") is not None else g.get("fnum")
        den_s = g.get("lden") if g.get("lden") is not None else g.get("fden")
        if num_s is None:
            value = _from_match(m)
            return value is not None and value.denominator == 1
        num, den = _signed(num_s), _signed(den_s or "")
        if num is None or den is None or den == 0 or num.denominator != 1 or den.denominator != 1:
            return False
        return den > 0 and gcd(int(num), int(den)) == 1
    except Exception:  # noqa: BLE001
        return False


def format_answer(value: Fraction | int) -> str:
    """The canonical spelling of an answer in solutions: ``12``, ``-7/3``."""
    v = Fraction(value)
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
