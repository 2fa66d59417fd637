"""Which front end a capture is fitted with, why the other is not, and why one tried was
not kept: the words fit.json and the fit's report give. Pure, no I/O.
"""

from __future__ import annotations

from loadgen.sim.twin.fit import ADMISSION, LATENCY, OUTPUT

FRONTEND_GAIN = 0.005  # held-out error (mean over its four figures) the front end must save
# the terms each kind of capture does not fit, and why
UNTIMED = {
    t.name: (
        "without the server's timings the capture cannot tell work requests queue for in the "
        "API server from time each spends outside the engine on its own: frontend_latency "
        "stands for both, kept from the base preset"
    )
    for t in (*ADMISSION, OUTPUT)
}
TIMED = {
    LATENCY.name: (
        "the capture has the server's timings: the gap between the client's TTFT and the "
        "server's is fitted as the API server's work (frontend_request, frontend_token), "
        "kept from the base preset"
    )
}


def not_kept(with_frontend: float, without: float, blocking: list[str]) -> str:
    """Why the front end was not kept, in words: it did not lower the held-out error enough,
    or it did but a term of the fit with it could not be identified (named, so that a
    front end the capture asks for is not mistaken for one it rules out)."""
    if without - with_frontend < FRONTEND_GAIN:
        return (
            f"held-out error {with_frontend:.1%} with a front end against {without:.1%} "
            "without: not kept"
        )
    which = f"{', '.join(blocking)} of that fit" if blocking else "any of its terms"
    return (
        f"a front end would lower the held-out error to {with_frontend:.1%} (from "
        f"{without:.1%}), but the capture cannot pin down {which}: not kept"
    )
