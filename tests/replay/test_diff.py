"""Output comparison: similarity, word diff, tool calls, the noise floor."""

from __future__ import annotations

import pytest

from replay import diff, measures


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("the cat sat", "the cat sat", 1.0),
        ("", "", 1.0),
        ("a b c d", "w x y z", 0.0),
        ("a b c d", "a b c e", 0.75),
    ],
    ids=["same", "both-empty", "disjoint", "one-word-changed"],
)
def test_similarity_is_a_word_level_ratio(a: str, b: str, expected: float) -> None:
    assert diff.similarity(a, b) == pytest.approx(expected)


def test_word_diff_rebuilds_both_sides_and_marks_changes() -> None:
    a = "Your flight to Guangzhou leaves Friday."
    b = "Your flight to Paris leaves  Friday."
    segs = diff.word_diff(a, b)
    assert "".join(s["text"] for s in segs if s["op"] != "insert").replace("  ", " ") == a
    assert "".join(s["text"] for s in segs if s["op"] != "delete") == b
    assert {"op": "delete", "text": "Guangzhou "} in segs
    assert {"op": "insert", "text": "Paris "} in segs


def test_tool_calls_match_on_name_and_canonical_arguments() -> None:
    a = [{"function": {"name": "search", "arguments": '{"day": "fri", "n": 2}'}}]
    b = [{"function": {"name": "search", "arguments": '{"n":2,"day":"fri"}'}}]
    c = [{"function": {"name": "search", "arguments": '{"n":3,"day":"fri"}'}}]
    assert diff.tool_calls_match(a, b)
    assert not diff.tool_calls_match(a, c)
    assert not diff.tool_calls_match(a, [])


def test_an_effect_inside_the_baseline_spread_is_within_noise() -> None:
    baseline = ["the flight leaves at nine", "the flight leaves at ten", "the flight leaves at nine"]
    noise = diff.noise_floor(baseline)
    # The spread is the edit distance's (characters and words, replay.measures).
    assert noise["max"] == pytest.approx(measures.edit_distance(baseline[0], baseline[1]))
    assert noise["max"] > 0
    assert diff.effect("the flight leaves at ten", baseline, noise)["within_noise"] is True
    assert diff.effect("I cannot help with that request", baseline, noise)["within_noise"] is False


def test_with_identical_samples_the_noise_floor_is_zero_and_any_change_counts() -> None:
    noise = diff.noise_floor(["Guangzhou.", "Guangzhou.", "Guangzhou."])
    assert noise["max"] == 0.0 and noise["exact_all"]
    assert diff.effect("Guangzhou.", ["Guangzhou."] * 3, noise)["within_noise"] is True
    assert diff.effect("Paris.", ["Guangzhou."] * 3, noise)["within_noise"] is False


def test_compare_reports_deltas_and_embedding_similarity() -> None:
    out = diff.compare(
        a_text="a b",
        b_text="a c",
        a_usage={"prompt_tokens": 50, "latency_ms": 100.0},
        b_usage={"prompt_tokens": 30, "latency_ms": 80.0},
        a_embedding=[1.0, 0.0],
        b_embedding=[1.0, 1.0],
    )
    assert out["prompt_tokens_delta"] == -20
    assert out["latency_ms_delta"] == -20.0
    assert out["embedding_similarity"] == pytest.approx(0.7071, abs=1e-3)
    assert not out["exact"]
