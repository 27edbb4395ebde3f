"""Forced alignment with PocketSphinx's bundled en-us acoustic model and dictionary.

`Decoder.set_align_text()` then `seg()` give word frames (10 ms). A decoder's front end
keeps state from one utterance to the next: without `reinit_feat()` before each, the same
clip aligned after different ones moved a boundary by 20 ms in 1-5 of 16 cases, and 8
threads with a decoder each disagreed with one thread in 21-40 of 160. The binding holds the
GIL while it decodes (2 threads took as long as 1), so threads gain nothing: one decoder
per aligner (building it loads the model, about 0.4 s) serves one utterance at a time
behind a lock, about 70 audio seconds per second per process (bench.align). Words outside
the dictionary are left out of the alignment and placed between their neighbours afterwards.
"""


from core.audio import Audio
from core.hearing import SphinxRecognizer, decoded, pcm16
from workers.aligners import Word, fill, words_of


class SphinxAligner(SphinxRecognizer):
    """The CPU default aligner and recogniser (English): the recogniser of core.hearing,
    and forced alignment on its full-dictionary decoder, behind the same lock."""

    def align(self, audio: Audio, rate: int, text: str) -> list[Word] | None:
        """Return every word of `text` with its span in samples at `rate`, or None."""
        words = words_of(text)
        if not words or not len(audio):
            return None
        raw = pcm16(audio, rate)
        with self._lock:
            decoder = self._built()
            placeable = [decoder.lookup_word(w) is not None for w in words]
            known = [w for w, ok in zip(words, placeable, strict=True) if ok]
            if not known:
                return None
            try:
                decoder.set_align_text(" ".join(known))
                spans = decoded(decoder, raw)
            except RuntimeError:
                return None
        if [w for w, _, _ in spans] != known:
            return None
        scale = rate / 100  # frames to samples at the caller's rate
        placed = iter(spans)
        out: list[Word | None] = []
        for word, ok in zip(words, placeable, strict=True):
            if not ok:
                out.append(None)
                continue
            _, start, end = next(placed)
            out.append(Word(word, min(round(start * scale), len(audio)),
                            min(round(end * scale), len(audio))))
        return fill(words, out, len(audio), rate)
