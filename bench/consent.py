"""The consent check's margin: how much of the consent statement the recogniser gets wrong
when a voice reads it, and when the voice reads something else of about its length.

Every voice of both CPU engines reads the statement (core.consent.STATEMENT) and OTHERS;
each recording goes through `core.consent.hear`'s recogniser, as the API hears a consent.
A recording is accepted at MAX_WORD_ERROR or under. What it leaves out: human speakers,
microphones and rooms (no recordings of people ship here); synthetic voices stand in.

    python -m bench.consent
"""

import argparse
import statistics
from typing import Any

from bench.common import save, table

OTHERS = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk.",
    "Farmers carried baskets of apples to the market along the narrow road.",
    "I do not agree to anything today, so please stop recording my voice.",
    "My voice is my own and nobody may copy it for a synthetic version.",
)


def main() -> None:
    """Run the benchmark and print its table."""
    argparse.ArgumentParser(description=__doc__).parse_args()
    from core.catalog import KOKORO_VOICES, kokoro_model, piper_model
    from core.consent import MAX_WORD_ERROR, STATEMENT, _shared
    from core.hearing import word_error_rate, words_of
    from workers.engines import SpeechRequest
    from workers.engines.kokoro import KokoroEngine
    from workers.engines.piper import PiperEngine

    engines: dict[str, tuple[Any, list[str]]] = {
        "piper": (PiperEngine(piper_model("piper")), ["joe"]),
               "kokoro": (KokoroEngine(kokoro_model("kokoro")), list(KOKORO_VOICES))}
    expected = words_of(STATEMENT)
    results: dict[str, dict[str, Any]] = {}
    for name, (engine, voices) in engines.items():
        for voice in voices:
            errors = []
            for text in (STATEMENT, *OTHERS):
                audio = engine.synthesize([SpeechRequest(text=text, voice=voice)])[0]
                heard = _shared().transcribe(audio, engine.sample_rate, STATEMENT) or []
                errors.append(word_error_rate(expected, [w.word for w in heard]))
            results[f"{name}/{voice}"] = {"statement": errors[0], "others": errors[1:]}
    rows = [[voice, f"{r['statement']:.2f}", f"{min(r['others']):.2f}",
             f"{statistics.mean(r['others']):.2f}"] for voice, r in results.items()]
    print(f"Word error against the statement; accepted at {MAX_WORD_ERROR} or under")
    print(table(["voice", "statement read", "others: min", "others: mean"], rows))
    worst = max(r["statement"] for r in results.values())
    closest = min(min(r["others"]) for r in results.values())
    print(f"\nworst statement {worst:.2f}; closest other text {closest:.2f}")
    save("consent", {"max_word_error": MAX_WORD_ERROR, "statement": STATEMENT,
                     "others": list(OTHERS), "voices": results,
                     "worst_statement": worst, "closest_other": closest})


if __name__ == "__main__":
    main()
