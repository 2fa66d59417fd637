"""A capacity search's sentence for a virtual: target: it names the twin (replicas, what-if
flags), says "predicted" and how far to trust it — the held-out error its fitted preset
carries, of the binding SLO's figure when the fit checked it — or, for a bundled preset,
that it was fitted to no server. Built from capacity.json entries made here."""

from __future__ import annotations

from typing import Any

from loadgen.capacity.advice import sentence

SLO = {"ttft": {"limit_s": 0.8, "percentile": "p90"}}
FIT = {"error": 0.05, "ttft_p50": -0.02, "ttft_p90": 0.071, "tpot_p50": 0.01, "tpot_p90": 0.03}


def twin(bundled: bool = False, fit: dict | None = FIT, **more: Any) -> dict[str, Any]:
    return {"preset": "fitted", "args": "", "replicas": 1, "bundled": bundled, "fit": fit} | more


def entry(predicted: dict[str, Any] | None, binding: str = "ttft") -> dict[str, Any]:
    slo = {"metric": binding, "percentile": "p90", "limit_s": 0.8, "value_s": 1.1, "level": 1.8}
    return {
        "capacity": 1.6,
        "bracket": [1.6, 1.8],
        "undecided": [],
        "converged": True,
        "output_tokens_per_s": 700.0,
        "binding": binding,
        "binding_slo": slo if binding in SLO else None,
        "predicted": predicted,
    }


def said(name: str, t: dict[str, Any]) -> str:
    return sentence({"by": "speed", "slo": SLO, "precision": 0.05, "targets": {name: t}})


def test_a_fitted_preset_says_predicted_with_its_held_out_error() -> None:
    assert said("virtual:fitted", entry(twin())) == (
        "At TTFT ≤ 800 ms (P90), this traffic can grow 1.6x on one replica of virtual:fitted "
        "before TTFT P90 passes 800 ms (1.10 s at 1.8x) (predicted; held-out error 7.1% on "
        "TTFT P90)."
    )


def test_a_what_if_names_its_flags_and_that_the_fit_had_none() -> None:
    flags = "--max-num-seqs 128"
    text = said("virtual:fitted", entry(twin(args=flags, what_if=flags, replicas=2)))
    assert "on 2 replicas of virtual:fitted with --max-num-seqs 128 before" in text
    assert text.endswith("(predicted; held-out error 7.1% on TTFT P90, fitted without "
                         "--max-num-seqs 128).")  # fmt: skip


def test_saturation_binding_gives_the_fits_mean_error() -> None:
    text = said("virtual:fitted", entry(twin(), binding="steady_state"))
    assert text.endswith("(predicted; held-out error 5%).")


def test_a_tiny_error_is_not_given_false_precision() -> None:
    text = said("virtual:fitted", entry(twin(fit=FIT | {"ttft_p90": 5.4e-05})))
    assert text.endswith("(predicted; held-out error under 0.1% on TTFT P90).")


def test_a_bundled_preset_says_it_was_not_fitted() -> None:
    text = said("virtual:llama", entry(twin(bundled=True, fit=None)))
    assert text.endswith("(predicted from a bundled preset; not fitted to your server).")
    assert "held-out" not in text


def test_an_uncalibrated_bundled_preset_says_so() -> None:
    text = said("virtual:ascend", entry(twin(bundled=True, fit=None, uncalibrated="datasheet")))
    assert text.endswith("(predicted from an uncalibrated bundled preset; not fitted to your "
                         "server).")  # fmt: skip


def test_a_preset_file_without_a_fit_says_so() -> None:
    text = said("virtual:mine", entry(twin(fit=None)))
    assert text.endswith("(predicted from a preset file that records no held-out error).")


def test_a_server_is_not_marked() -> None:
    text = said("vllm", entry(None))
    assert "predicted" not in text and "replica of" not in text
