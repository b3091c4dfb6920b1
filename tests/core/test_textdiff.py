"""The word diff of the turn page: exact segments, reconstruction, shortening, large inputs."""

from __future__ import annotations

import pytest

from core import textdiff


def _apply(segments: list[tuple[str, str]], side: str) -> str:
    keep = {"a": ("equal", "delete"), "b": ("equal", "insert")}[side]
    return "".join(t for op, t in segments if op in keep)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("window seat", "window seat; morning", [("equal", "window seat"), ("insert", "; morning")]),
        (
            "turn 13 now",
            "turn 14 now",
            [("equal", "turn "), ("delete", "13"), ("insert", "14"), ("equal", " now")],
        ),
        ("gone", "", [("delete", "gone")]),
        ("", "new", [("insert", "new")]),
        ("same\ntext", "same\ntext", [("equal", "same\ntext")]),
    ],
    ids=["append", "replace-word", "all-deleted", "all-inserted", "unchanged"],
)
def test_word_diff_segments(a: str, b: str, expected: list[tuple[str, str]]) -> None:
    assert textdiff.word_diff(a, b, context=0) == expected


def test_segments_rebuild_both_texts() -> None:
    a = "line one\nthe quick brown fox\njumps over\nthe lazy dog\n"
    b = "line one\nthe quick red fox\nleaps over\nthe lazy dog\nand more\n"
    segs = textdiff.word_diff(a, b, context=0)
    assert _apply(segs, "a") == a
    assert _apply(segs, "b") == b


def test_long_unchanged_runs_are_shortened() -> None:
    common = "".join(f"unchanged line {i}\n" for i in range(500))
    segs = textdiff.word_diff(common + "old end", common + "new end", context=50)
    skip = [t for op, t in segs if op == "skip"]
    assert len(skip) == 1 and "unchanged characters" in skip[0]
    assert sum(len(t) for op, t in segs if op == "equal") <= 50 + len(" end")
    assert ("delete", "old") in segs and ("insert", "new") in segs


def test_html_is_left_to_the_template() -> None:
    segs = textdiff.word_diff("<b>x</b>", "<script>y</script>", context=0)
    assert "".join(t for _, t in segs if _ != "delete") == "<script>y</script>"


def test_big_blocks_stay_fast() -> None:
    a = "".join(f"row {i} value {i * 7}\n" for i in range(20_000))
    b = a.replace("row 10000 value 70000", "row 10000 value 1")
    segs = textdiff.word_diff(a, b)
    assert ("delete", "70000") in segs and ("insert", "1") in segs


def test_messages_text_includes_roles_and_tool_calls() -> None:
    text = textdiff.messages_text(
        [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    )
    assert "[assistant]" in text and '"name": "f"' in text and "tool_call_id=c1" in text


def _prose(seed: int, n: int) -> str:
    import random

    rng = random.Random(seed)
    vocab = "the a of to order parcel refund late carrier status window seat summary, because; (note) 42"
    vocab = vocab.split()
    return "\n".join(" ".join(rng.choice(vocab) for _ in range(12)) + "." for _ in range(n // 12))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (_prose(1, 450), _prose(2, 450)),  # a summary rewritten: few equal runs, many common words
        (_prose(3, 300), _prose(3, 300).replace("refund", "reship")),  # the same text, words swapped
        (_prose(4, 200), _prose(4, 200) + "\n" + _prose(5, 60)),  # a history that grew
        ("", _prose(6, 100)),
    ],
    ids=["rewritten", "edited", "appended", "from-empty"],
)
def test_matching_is_the_standard_librarys(a: str, b: str) -> None:
    """The diff runs difflib's algorithm through cydifflib: the same opcodes as the standard
    library's SequenceMatcher on our line and word tokens, so the segments shown are too."""
    import difflib

    lines = (a.splitlines(keepends=True), b.splitlines(keepends=True))
    for x, y in (lines, (textdiff._words(a), textdiff._words(b))):
        ours = textdiff.SequenceMatcher(None, x, y, autojunk=False).get_opcodes()
        assert ours == difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes()
    segs = textdiff.word_diff(a, b, context=0)
    assert _apply(segs, "a") == a and _apply(segs, "b") == b


def test_segments_render_as_escaped_html() -> None:
    from ingest.templatetags.ctxobs_ui import diff_html

    segs = [("equal", "a <b> & "), ("delete", "<script>x</script>"), ("insert", '"y"'), ("skip", "⋯ 3 ⋯")]
    assert diff_html(segs) == (
        "a &lt;b&gt; &amp; <del>&lt;script&gt;x&lt;/script&gt;</del><ins>&quot;y&quot;</ins>"
        '<span class="skip">⋯ 3 ⋯</span>'
    )


def test_prose_diff_ignores_spacing_and_keeps_it_with_the_word_before() -> None:
    segs = textdiff.prose_diff("  the  flight\nleaves now", "  the flight leaves later")
    assert segs == [("equal", "  the flight leaves "), ("delete", "now"), ("insert", "later")]
    assert textdiff.prose_diff(None, "") == [] and textdiff.prose_diff("", "x") == [("insert", "x")]
