"""The answer extractor: adversarial corpus, property tests, and proof that nothing runs."""

import builtins
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained_grpo.envs.math.extract import (
    MAX_DIGITS,
    extract_answer,
    find_answer,
    format_answer,
    has_required_form,
    is_reduced_fraction,
    parse_number,
)

F = Fraction

# (text, strict answer, lenient answer, form)
CORPUS = [
    ("7 + 5 = 12\n#### 12", F(12), F(12), "hash"),
    ("#### -3.5", F(-7, 2), F(-7, 2), "hash"),
    ("#### 1,234,567", F(1234567), F(1234567), "hash"),
    ("#### 7/12", F(7, 12), F(7, 12), "hash"),
    ("#### \\frac{7}{12}", F(7, 12), F(7, 12), "hash"),
    ("#### -\\dfrac{3}{4}", F(-3, 4), F(-3, 4), "hash"),
    ("#### $12.50.", F(25, 2), F(25, 2), "hash"),
    ("#### \u221242", F(-42), F(-42), "hash"),  # unicode minus
    ("#### \uff14\uff12", F(42), F(42), "hash"),  # full-width digits
    ("#### 1e3", F(1000), F(1000), "hash"),
    # several candidate answers: the last marker wins
    ("#### 12\nwait, no\n#### 13", F(13), F(13), "hash"),
    ("#### 12 #### 13", F(13), F(13), "hash"),
    ("maybe 3, maybe 4\n#### 5\nthanks, 7 is my favourite", F(5), F(5), "hash"),
    # not the required form, lenient finds something
    ("The answer is 12.", None, F(12), "phrase"),
    ("Answer: forty-two", None, F(42), "phrase"),
    ("answer = one hundred and five", None, F(105), "phrase"),
    ("The final answer is minus seven.", None, F(-7), "phrase"),
    ("#### forty-two apples", None, F(42), "hash_lenient"),
    ("#### 42 apples", None, F(42), "hash_lenient"),
    ("so \\boxed{3/4}", None, F(3, 4), "boxed"),
    ("\\boxed{\\frac{1}{2}} and later 9", None, F(1, 2), "boxed"),
    ("x = 5-3 so 2", None, F(2), "last_number"),
    ("I think 3, no, 4", None, F(4), "last_number"),
    ("2023-11-29", None, F(29), "last_number"),  # a date's dash is not a sign
    ("####\n42", None, F(42), "last_number"),  # the marker's line is empty
    # code-like text: read, never run
    ("#### __import__('os').system('rm -rf /')", None, None, None),
    ("eval('6*7')", None, F(7), "last_number"),
    ("#### exec(\"print(1)\")", None, F(1), "last_number"),
    ("`#### ${1+1}`", None, F(1), "last_number"),
    # huge numbers and degenerate literals
    ("#### " + "9" * (MAX_DIGITS + 1), None, None, None),
    ("#### " + "9" * 200, F(10**200 - 1), F(10**200 - 1), "hash"),
    ("#### 1e999999999", None, None, None),
    ("#### 1/0", None, None, None),
    ("#### \\frac{1}{0}", None, None, None),
    ("", None, None, None),
    ("no numbers here", None, None, None),
    ("#### ", None, None, None),
]


@pytest.mark.parametrize(("text", "strict", "lenient", "form"), CORPUS)
def test_adversarial_corpus(text, strict, lenient, form):
    assert extract_answer(text) == strict
    assert extract_answer(text, mode="lenient") == lenient
    found = find_answer(text)
    assert found.form == form
    assert has_required_form(text) == (strict is not None)


def test_parse_number_whole_string_only():
    assert parse_number("-1,234.5") == F(-2469, 2)
    assert parse_number(" $42 ") == F(42)
    assert parse_number("3/4") == F(3, 4)
    assert parse_number("twenty one") == F(21)
    assert parse_number("a thousand") == F(1000)
    assert parse_number("two million three hundred thousand and five") == F(2_300_005)
    assert parse_number("seventeen", allow_words=False) is None
    for bad in ("42 apples", "", "   ", "a", "and", "one two three four".replace(" ", "x"), "1/0", None, 42, b"42"):
        assert parse_number(bad) is None


def test_reduced_fraction_spelling():
    assert is_reduced_fraction("1/2") and is_reduced_fraction("\\frac{3}{7}") and is_reduced_fraction("5")
    assert not is_reduced_fraction("2/4") and not is_reduced_fraction("\\frac{3}{9}") and not is_reduced_fraction("0.5")
    assert not is_reduced_fraction("abc")


def test_format_answer_round_trips():
    for v in (F(0), F(-7), F(7, 3), F(-1, 2), F(10**30)):
        assert extract_answer(f"#### {format_answer(v)}") == v


def test_mode_is_checked():
    with pytest.raises(ValueError, match="'strict' or 'lenient'"):
        extract_answer("#### 1", mode="fuzzy")


def _cpu_seconds(text: str) -> float:
    """Least CPU time of three ``find_answer`` calls (CPU time, not wall time: other
    processes on the machine do not enter it; the least of three drops a cache-cold call)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        find_answer(text)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("unit", "copies", "tail"),
    [("1,", 25_000, ""), ("#### ", 25_000, ""), ("\\boxed{", 12_500, ""), ("answer is ", 12_500, ""),
     ("-", 25_000, "1"), ("9", 25_000, ""), ("1/", 25_000, ""), ("\\frac{1}{", 5_000, ""),
     ("one ", 12_500, ""), ("1.", 25_000, "")],
)
def test_pathological_inputs_take_linear_work(unit: str, copies: int, tail: str) -> None:
    """Catastrophic backtracking shows as super-linear growth: quadrupling an input of about
    50,000 characters multiplies the extractor's CPU time by about 4 when the work is linear and
    by 16 or more when it is quadratic, so a ratio under 8 rules the latter out whatever the
    machine's speed (200,000 characters is the size the extractor must read in one go). The
    timeout marker guards against a hang."""
    small = _cpu_seconds(unit * copies + tail)
    large = _cpu_seconds(unit * (4 * copies) + tail)
    # A floor of 2 ms keeps the ratio meaningful where both calls are too quick to time.
    assert large / max(small, 0.002) < 8.0, (small, large)


@pytest.fixture
def no_code_execution(monkeypatch):
    """Make eval/exec/compile/__import__ of new modules fail loudly during a test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the extractor tried to execute or compile text")

    for name in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, name, forbidden)
    return forbidden


def test_corpus_never_executes(no_code_execution):
    for text, strict, lenient, _ in CORPUS:
        assert extract_answer(text) == strict
        assert extract_answer(text, mode="lenient") == lenient


# --- properties ------------------------------------------------------------------------
_PIECES = st.sampled_from(
    ["####", "#", " ", "\n", "-", "+", "\u2212", ".", ",", "/", "$", "\\boxed{", "}", "{", "\\frac{", "answer is ",
     "Answer:", "e", "E", "forty", "-two", " hundred", " and ", "minus ", "__import__('os')", "eval(", ")", "0", "7", "12",
     "999999999999", "1,000", "3.14", "\uff17"]
)
_TEXT = st.one_of(st.text(max_size=300), st.lists(_PIECES, max_size=40).map("".join))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
def test_never_raises_and_returns_fraction_or_none(text):
    for mode in ("strict", "lenient"):
        value = extract_answer(text, mode=mode)
        assert value is None or isinstance(value, Fraction)
    found = find_answer(text)
    assert (found.value is None) == (found.form is None)
    assert parse_number(text) is None or isinstance(parse_number(text), Fraction)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_never_executes_anything(text):
    calls = []
    real = (builtins.eval, builtins.exec, builtins.compile)

    def spy(*args, **kwargs):
        calls.append(args)
        raise AssertionError("executed")

    builtins.eval = builtins.exec = builtins.compile = spy
    try:
        extract_answer(text, mode="lenient")
        has_required_form(text)
    finally:
        builtins.eval, builtins.exec, builtins.compile = real
    assert not calls


@settings(max_examples=300, deadline=None)
@given(st.fractions(max_denominator=10**6).filter(lambda f: abs(f.numerator) < 10**50), st.text(max_size=50))
def test_required_form_round_trip(value, prefix):
    # Whatever precedes it, a final '#### <value>' line is read exactly.
    text = f"{prefix}\n#### {format_answer(value)}"
    assert extract_answer(text) == value


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_integers_with_thousands_separators(n):
    assert extract_answer(f"#### {n:,}") == n
    assert extract_answer(f"The answer is {n}.", mode="lenient") == n


# A number that starts an expression is no answer in rules 1-3 (not its first number, nor a
# later rule's): each of these would otherwise read 9 (or 4) and earn reward 1 on "What is 3 + 6?".
@pytest.mark.parametrize("text", [
    "#### 9^2", "#### 9 + 1", "#### 9!", "#### 9^9^9^9", "#### 9 * 1", "#### 9 (nine)", "#### 9 9",
    "#### 3 + 6 = 9", "so \\boxed{3 * 4}", "The answer is 9 + 1", "The answer is 9!",
    # The same expressions in words, a decimal comma or a time: not the number alone either.
    "#### 9 plus 1", "#### 9 squared", "#### 9 x 9", "#### 9 times 2", "#### 9 to the power of 2", "#### 9 mod 2",
    "#### 9 over 10", "#### nine plus one", "#### 9,5", "#### 9:30", "\\boxed{9 plus 1}", "The answer is 9 squared",
    # After the marker or in the box, no other number may follow the answer.
    "#### 9 apples and 2 pears", "\\boxed{9 then 10}",
])
def test_an_expression_after_the_marker_is_no_answer(text: str) -> None:
    assert find_answer(text).value is None and extract_answer(text) is None
    assert extract_answer(text, mode="lenient") is None


@pytest.mark.parametrize(("text", "value"), [
    ("#### 9", F(9)), ("#### 9.", F(9)), ("#### 9 apples", F(9)), ("#### forty-two apples", F(42)),
    ("#### 50%", F(50)), ("#### 12 dollars.", F(12)), ("\\boxed{12}", F(12)), ("The answer is 10.", F(10)),
    ("#### 9 xylophones", F(9)), ("#### 1,234 apples", F(1234)),
    ("The answer is 9 because 3 + 6 = 9.", F(9)),  # after the phrase an explanation may follow
])
def test_a_number_followed_by_words_is_still_read(text: str, value: Fraction) -> None:
    assert extract_answer(text, mode="lenient") == value


@pytest.mark.timeout(60)
def test_a_dataset_answer_with_a_huge_exponent_is_refused_at_once() -> None:
    from constrained_grpo.tasks import make_env

    env = make_env("Math/ChainSum-v0").unwrapped
    row = env.problem_row(0)
    # Fraction('1e1000000000') would run for minutes: the timeout marker fails such a hang.
    with pytest.raises(ValueError, match=r"answer '1e1000000000' is not a number literal \(\|exponent\| <= 100\)"):
        env.score_row(row["prompt"], "1e1000000000", False, row["uid"], "#### 5", 4)
    assert env.score_row(row["prompt"], row["answer"], row["reduced"], row["uid"], f"#### {row['answer']}", 4).reward == 1.0
