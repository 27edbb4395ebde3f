"""The vLLM-Omni adapter's own logic, on the CPU.

The only test double in the suite stands here, at the GPU engine boundary: FakeOmni mimics
AsyncOmni.generate() and its three output shapes. The real engine runs in the gpu-marked test
and in bench/gpu_engine.py on the lent H100.
"""

import itertools
import json
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from core.catalog import Qwen3Config, qwen3_model
from tests.doubles.omni import SCALE, FakeOmni, FakeTensor, SlowOmni, output
from workers.engines import SpeechRequest
from workers.engines.qwen3_handoff import WHOLE, codebook_major, marked_whole
from workers.engines.qwen3_stage1 import realtime
from workers.engines.qwen3_tts import (
    AudioCollector,
    OutputKind,
    Reference,
    additional_information,
)
from workers.engines.vllm_omni import BATCH_PRIORITY, REALTIME_PRIORITY, VllmOmniEngine
from workers.tuning import tuning

MODEL = Path(__file__).parent / "data" / "qwen3-tts-0.6b-customvoice"
@pytest.fixture(scope="module")
def config() -> Qwen3Config:
    return Qwen3Config.load(MODEL)


def make_engine(config: Qwen3Config, shape: str = "chunks",
                max_in_flight: int = 64) -> tuple[VllmOmniEngine, FakeOmni]:
    fake = FakeOmni(shape)
    info = qwen3_model(str(MODEL))
    engine = VllmOmniEngine(info, config, omni_factory=lambda: fake,
                            prompt_length=lambda info: 10 + len(info["text"][0]),
                            max_in_flight=max_in_flight)
    return engine, fake


def test_config_gives_task_type_speakers_and_languages(config: Qwen3Config) -> None:
    info = qwen3_model(str(MODEL))
    assert config.task_type == "CustomVoice"
    assert info.task_type == "CustomVoice"
    assert "ryan" in [v.id for v in info.voices]
    assert "English" in info.languages
    assert info.sample_rate == 24000
    assert info.engine == "vllm-omni"
    assert info.id == "qwen3-tts-0.6b-customvoice"


def test_request_fields_become_additional_information(config: Qwen3Config) -> None:
    info = additional_information(config, SpeechRequest(
        text="Hello.", voice="Ryan", instructions="warmly", language="en", max_new_tokens=99))
    assert info == {"task_type": ["CustomVoice"], "text": ["Hello."], "language": ["English"],
                    "instruct": ["warmly"], "max_new_tokens": [99], "speaker": ["ryan"]}
    assert additional_information(config, SpeechRequest(text="x", voice="ryan"))[
        "language"] == ["Auto"]


@pytest.mark.parametrize(("request_", "message"), [
    (SpeechRequest(text="x", voice="nobody"), "not a speaker"),
    (SpeechRequest(text="x", voice="ryan", language="tlh"), "not supported"),
    (SpeechRequest(text="x", voice="ryan", task_type="Base"), "one task type"),
])
def test_requests_are_validated_per_task_type(config: Qwen3Config, request_: SpeechRequest,
                                              message: str) -> None:
    with pytest.raises(ValueError, match=message):
        additional_information(config, request_)


def test_voice_design_needs_instructions_and_base_needs_a_reference(
        config: Qwen3Config) -> None:
    design = Qwen3Config(config.path, "VoiceDesign", (), config.languages, 24000, config.talker)
    with pytest.raises(ValueError, match="instructions"):
        additional_information(design, SpeechRequest(text="x", voice="designed"))
    assert additional_information(design, SpeechRequest(
        text="x", voice="designed", instructions="a calm old man"))["instruct"] == [
        "a calm old man"]
    base = Qwen3Config(config.path, "Base", (), config.languages, 24000, config.talker)
    with pytest.raises(ValueError, match="upload"):
        additional_information(base, SpeechRequest(text="x", voice="mine"))
    info = additional_information(base, SpeechRequest(text="x", voice="mine"),
                                  Reference([0.1, 0.2], 24000, "hi"))
    assert info["ref_audio"] == [[[0.1, 0.2], 24000]]
    assert info["ref_text"] == ["hi"]
    assert info["x_vector_only_mode"] == [False]


@pytest.mark.parametrize("kind", list(OutputKind))
def test_collector_handles_each_output_shape(kind: OutputKind) -> None:
    chunks = [np.full(5, n, dtype=np.float32) for n in range(4)]
    collector = AudioCollector(kind)
    if kind is OutputKind.DELTA:
        news = [collector.add(output([FakeTensor(c)])) for c in chunks]
    elif kind is OutputKind.CUMULATIVE:
        news = [collector.add(output([FakeTensor(c) for c in chunks[: n + 1]]))
                for n in range(4)]
    else:
        news = [collector.add(output(FakeTensor(np.concatenate(chunks))))]
    assert collector.add(SimpleNamespace(request_output=None, multimodal_output=None)).size == 0
    assert np.array_equal(collector.audio(), np.concatenate(chunks))
    assert sum(len(n) for n in news) == 20


@pytest.mark.parametrize("shape", ["tensor", "chunks"])
def test_synthesize_returns_the_whole_audio(config: Qwen3Config, shape: str) -> None:
    engine, fake = make_engine(config, shape)
    audio = engine.synthesize([SpeechRequest(text="Hello there.", voice="ryan",
                                             max_new_tokens=60)])[0]
    assert len(audio) == 60 * SCALE
    assert set(audio.tolist()) == {float(len("Hello there."))}
    assert fake.calls[0]["params"][0].output_kind is OutputKind.FINAL_ONLY


def test_stream_yields_chunks_as_they_come(config: Qwen3Config) -> None:
    engine, fake = make_engine(config)
    chunks = list(engine.stream(SpeechRequest(text="Hi.", voice="ryan", max_new_tokens=70,
                                              realtime=True)))
    assert [len(c) for c in chunks] == [250, 250, 200]
    assert fake.calls[0]["params"][0].output_kind is OutputKind.DELTA
    assert fake.calls[0]["priority"] == REALTIME_PRIORITY
    assert realtime(SimpleNamespace(request_id=fake.calls[0]["request_id"]))  # Code2Wav's order


def test_a_traced_engine_records_a_realtime_requests_submit_and_first_audio_only(
        config: Qwen3Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("NARRATOR_ENGINE_TRACE", str(path))
    tuning.cache_clear()  # as in a process started with the variable set
    engine, fake = make_engine(config)
    list(engine.stream(SpeechRequest(text="Hi.", voice="ryan", max_new_tokens=70,
                                     realtime=True)))
    engine.synthesize([SpeechRequest(text="A segment.", voice="ryan")])
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["ev"] for e in events] == ["submit", "first_audio"]
    assert {e["rid"] for e in events} == {fake.calls[0]["request_id"]}
    assert events[0]["t"] <= events[1]["t"]


def test_params_carry_seed_tokens_and_priority(config: Qwen3Config) -> None:
    engine, fake = make_engine(config)
    engine.synthesize([SpeechRequest(text="a", voice="ryan", seed=7, max_new_tokens=5)])
    talker = fake.calls[0]["params"][0]
    assert talker.max_tokens == 5
    assert talker.seed == 7
    assert talker.extra_args == {"tts_local_seed": 7}
    assert fake.calls[0]["priority"] == BATCH_PRIORITY
    assert not realtime(SimpleNamespace(request_id=fake.calls[0]["request_id"]))
    assert fake.default_sampling_params_list[0].seed is None  # defaults untouched
    prompt = fake.calls[0]["prompt"]
    assert prompt["prompt_token_ids"] == [1] * 11


def assert_concurrent_requests_keep_their_own_audio(engine: Any, requests: int = 64) -> None:
    """Speak `requests` texts from as many threads; each gets back its own length and marker."""
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        text = "x" * (i + 1)  # the fake's marker is the text length
        results[i] = engine.synthesize([SpeechRequest(text=text, voice="ryan",
                                                      max_new_tokens=20 + i)])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(requests):
        assert len(results[i]) == (20 + i) * SCALE
        assert set(results[i].tolist()) == {float(i + 1)}


def test_concurrent_requests_keep_their_own_state(config: Qwen3Config) -> None:
    engine, fake = make_engine(config, max_in_flight=16)
    assert_concurrent_requests_keep_their_own_audio(engine)
    assert len({c["request_id"] for c in fake.calls}) == 64


def test_engine_starts_once_and_lazily(config: Qwen3Config) -> None:
    created: list[int] = []
    fake = FakeOmni("chunks")

    def factory() -> FakeOmni:
        created.append(1)
        return fake

    engine = VllmOmniEngine(qwen3_model(str(MODEL)), config, omni_factory=factory,
                            prompt_length=lambda info: 1)
    assert created == []
    threads = [threading.Thread(target=engine.synthesize,
                                args=([SpeechRequest(text="a", voice="ryan",
                                                     max_new_tokens=3)],)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert created == [1]


def test_close_shuts_the_engine_down_once_and_stops_its_loop(config: Qwen3Config) -> None:
    engine, fake = make_engine(config)
    engine.close()  # never started: nothing to do
    engine.start()
    thread = engine._thread
    assert thread is not None
    assert thread.is_alive()
    engine.close()
    engine.close()
    assert fake.shut_down == 1
    assert not thread.is_alive()


def test_warm_up_fills_the_batch_and_the_realtime_headroom_at_once(config: Qwen3Config) -> None:
    """The warm-up reaches the deploy config's max_num_seqs: the in-flight bound of whole
    requests plus its realtime sequences, streamed, all in the engine together."""
    from workers.runtime.warmup import warm_up
    from workers.settings import WorkerSettings

    slow = SlowOmni(seconds_per_frame=0.05)  # 20 frames: each request holds 1 s
    engine = VllmOmniEngine(qwen3_model(str(MODEL)), config, omni_factory=lambda: slow,
                            prompt_length=lambda info: 10, max_in_flight=4)
    warm_up(engine, WorkerSettings(engine="vllm-omni", model=str(MODEL), vllm_max_in_flight=4,
                                   vllm_realtime_sequences=3, vllm_warmup_tokens=20))
    assert slow.peak == 7
    priorities = sorted(call["priority"] for call in slow.calls)
    assert priorities == [REALTIME_PRIORITY] * 3 + [BATCH_PRIORITY] * 4
    assert all(call["params"][0].max_tokens == 20 for call in slow.calls)


def test_only_answers_nobody_streams_are_marked_whole(config: Qwen3Config) -> None:
    """Job segments and whole sync answers carry the hand-off's mark; streamed ones do not,
    so their audio still comes in windows as the talker makes it."""
    engine, fake = make_engine(config)
    engine.synthesize([SpeechRequest(text="a", voice="ryan", max_new_tokens=5)])
    engine.synthesize([SpeechRequest(text="b", voice="ryan", max_new_tokens=5, realtime=True)])
    list(engine.stream(SpeechRequest(text="c", voice="ryan", max_new_tokens=60, realtime=True)))
    marks = [call["prompt"]["additional_information"].get(WHOLE) for call in fake.calls]
    assert marks == [[1], [1], None]


def entries(**values: Any) -> Any:
    """A talker request as the stage process sees it: additional_information entries."""
    return SimpleNamespace(additional_information=SimpleNamespace(entries={
        key: SimpleNamespace(list_data=value) for key, value in values.items()}))


def test_whole_answers_in_windows_start_at_points_spread_by_request() -> None:
    """narrator_whole_window_frames: each request's first window ends between window/2 and
    window, the same in every process; later windows every `window` frames, each with up
    to WINDOW_CONTEXT frames before it, so windows cover every frame once."""
    from workers.engines.qwen3_handoff import WINDOW_CONTEXT, window_end, window_span

    ends = [window_end(f"req-{n}", 0, 100) for n in range(200)]
    assert all(50 <= e <= 100 for e in ends)
    assert len(set(ends)) > 30  # spread: not one step for all
    assert window_end("req-7", 0, 100) == window_end("req-7", 0, 100)
    assert window_end("req-7", 130, 100) == 230
    assert window_span(80, 0, WINDOW_CONTEXT) == (0, 0)
    assert window_span(180, 80, WINDOW_CONTEXT) == (55, 25)
    assert window_span(30, 10, WINDOW_CONTEXT) == (0, 10)
    sent, covered = 0, []
    for length in (window_end("r", 0, 100), 170, 250):
        start, context = window_span(length, sent, WINDOW_CONTEXT)
        covered += list(range(start + context, length))
        sent = length
    assert covered == list(range(250))


def test_the_hand_off_sends_a_whole_answer_once_or_in_windows_and_ends_it_once() -> None:
    """next_send over a request's talker steps, as the hand-off keeps its state: without
    windows one payload of every frame at the end; with them, windows that cover every frame
    once; a second "finished" call for the same request sends nothing spoken again."""
    from workers.engines.qwen3_handoff import next_send, window_end

    def run(window: int) -> list[tuple[str, int, int, int]]:
        sent, out = 0, []
        for length in range(1, 251):
            until = window_end("req-3", sent, window) if window else 0
            kind, start, context = next_send(length, sent, until, length == 250)
            if kind != "wait":
                out.append((kind, start, context, length))
                sent = 0 if kind == "last" else length
        out.append((*next_send(0, 0, 0, True), 0))  # finished again, cleared
        return out

    assert run(0) == [("last", 0, 0, 250), ("nothing", 0, 0, 0)]
    windows = run(100)
    assert [k for k, *_ in windows] == ["window", "window", "last", "nothing"]
    first = windows[0][3]
    assert 50 <= first <= 100
    assert windows[1] == ("window", first - 25, 25, first + 100)
    assert windows[2] == ("last", first + 75, 25, 250)
    assert next_send(180, 180, 280, True) == ("end", 0, 0)
    assert next_send(0, 0, 100, True) == ("nothing", 0, 0)


def test_a_ramped_stream_sends_windows_that_each_come_before_the_last_has_played() -> None:
    """narrator_stream_ramp [1, 2, 4, 8, 16] and 25-frame windows after it, with up to 72
    frames of context: every frame goes once, in order, and each window holds at most
    twice the frames of the one before it (its making takes less than that one plays)."""
    from workers.engines.qwen3_handoff import next_send, ramp_end

    ramp, sent, windows = [1, 2, 4, 8, 16], 0, []
    for length in range(1, 131):
        kind, start, context = next_send(length, sent, ramp_end(sent, ramp, 25),
                                         length == 130, 72)
        if kind != "wait":
            windows.append((start, context, length))
            sent = length
    assert [end for _, _, end in windows] == [1, 3, 7, 15, 31, 56, 81, 106, 130]
    assert [(start, context) for start, context, _ in windows[:3]] == [(0, 0), (0, 1), (0, 3)]
    assert windows[6:8] == [(0, 56, 81), (81 - 72, 72, 106)]  # context: up to 72 frames
    covered = [n for start, context, end in windows for n in range(start + context, end)]
    assert covered == list(range(130))
    sizes = [end - (start + context) for start, context, end in windows]
    assert all(later <= 2 * earlier for earlier, later in itertools.pairwise(sizes))


def test_the_hand_off_reads_the_mark_and_flattens_codebook_major() -> None:
    assert marked_whole(entries(narrator_whole=[1], text=["x"]))
    assert not marked_whole(entries(text=["x"]))
    assert not marked_whole(entries(narrator_whole=[0]))
    assert not marked_whole(SimpleNamespace(additional_information=None))
    frames = [[1, 2, 3], [4, 5, 6]]  # two frames of three codebooks
    assert codebook_major(frames) == [1, 4, 2, 5, 3, 6]
    assert codebook_major([]) == []


ANSWER = ("Thanks for calling the library. Your books are due back on Friday. "
          "You can renew them online or at the front desk. Anything else today?")


@pytest.fixture
def gpu_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from workers.settings import get_settings

    monkeypatch.setenv("NARRATOR_ENGINE", "vllm-omni")
    monkeypatch.setenv("NARRATOR_MODEL", str(MODEL))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_sentences_split_into_at_most_the_limit_in_order() -> None:
    from workers.speech import groups

    assert groups(ANSWER, "en", 1) == [ANSWER]
    assert groups("Just one sentence, however long it runs.", "en", 4) == [
        "Just one sentence, however long it runs."]
    pieces = groups(ANSWER, "en", 4)
    assert len(pieces) == 4
    assert " ".join(pieces) == ANSWER
    assert len(groups(ANSWER, "en", 2)) == 2
    assert " ".join(groups(ANSWER + "\n\nA second paragraph.", "en", 3)).endswith(
        "today? A second paragraph.")


LONG_SENTENCE = ("When the library reopens on Monday, the front desk will take returns all day, "
                 "the reading room will keep its usual hours until eight in the evening, and "
                 "the children's corner, closed since the flood, will welcome its first story "
                 "time at ten.")


def test_one_long_sentence_splits_at_its_clauses_and_a_short_one_stays_whole() -> None:
    """Fewer sentences than pieces: a sentence longer than CLAUSE_CHARS is cut after its
    commas (its clauses are spoken at once); with enough sentences, sentences stay whole."""
    from workers.speech import CLAUSE_CHARS, groups

    pieces = groups(LONG_SENTENCE, "en", 4)
    assert 2 <= len(pieces) <= 4
    assert " ".join(pieces) == LONG_SENTENCE
    assert all(p.endswith((",", ".")) for p in pieces)
    assert max(map(len, pieces)) < len(LONG_SENTENCE) / 1.5
    assert groups("A whole answer, at once.", "en", 4) == ["A whole answer, at once."]
    assert len(LONG_SENTENCE) > CLAUSE_CHARS
    four = ANSWER.replace("Friday the twelfth.", LONG_SENTENCE)
    assert all(LONG_SENTENCE in p or p not in LONG_SENTENCE for p in groups(four, "en", 4))


def test_clauses_are_joined_with_a_shorter_gap_than_sentences(gpu_settings: None) -> None:
    from workers.speech import CLAUSE_GAP, _gap

    class Rate:
        sample_rate = 1000

    sentence = len(_gap(Rate(), "It ended."))  # type: ignore[arg-type]
    assert sentence == 250
    assert len(_gap(Rate(), "it went on,")) == int(250 * CLAUSE_GAP)  # type: ignore[arg-type]
    assert len(_gap(Rate(), 'he said "stop."')) == sentence  # type: ignore[arg-type]


def test_a_sync_answer_shares_its_frames_among_its_pieces(gpu_settings: None) -> None:
    from workers.speech import requests_for

    requests = requests_for({"input": ANSWER, "voice": "ryan", "request_id": "req_1",
                             "max_new_tokens": 200, "language": "en"})
    assert [r.request_id for r in requests] == ["req_1.0", "req_1.1", "req_1.2", "req_1.3"]
    assert all(r.realtime for r in requests)
    shares = [r.max_new_tokens or 0 for r in requests]
    assert abs(sum(shares) - 200) <= 2
    assert max(shares) < 80
    assert requests_for({"input": ANSWER, "voice": "ryan", "request_id": "r"})[0] \
        .max_new_tokens is None


def test_a_sync_answers_pieces_are_spoken_at_once_and_joined_in_order(
        config: Qwen3Config, gpu_settings: None) -> None:
    """All pieces are in the engine together (streamed or whole); the audio comes back in
    the text's order with the sentence gap between pieces."""
    from workers.speech import _pieces_streamed, requests_for

    slow = SlowOmni(seconds_per_frame=0.01)
    engine = VllmOmniEngine(qwen3_model(str(MODEL)), config, omni_factory=lambda: slow,
                            prompt_length=lambda info: 10)
    requests = requests_for({"input": ANSWER, "voice": "ryan", "request_id": "r",
                             "max_new_tokens": 200})
    streamed = list(_pieces_streamed(engine, requests))
    assert slow.peak == 4
    gap = int(0.25 * engine.sample_rate)
    audio = np.concatenate(streamed)
    markers = [float(len(r.text)) for r in requests]  # the double's audio value per piece
    expected = np.concatenate([part for n, r in enumerate(requests) for part in (
        ([np.zeros(gap)] if n else []) + [np.full((r.max_new_tokens or 0) * SCALE, markers[n])])])
    assert np.array_equal(audio, expected)


class Talker:
    """A streamed request's talker steps as the stage process reports them to the hand-off."""

    def __init__(self) -> None:
        self.code_prompt_token_ids: dict[str, list[Any]] = defaultdict(list)
        self.request_payload: dict[str, Any] = {}
        self.done = False
        self.request = SimpleNamespace(external_req_id="stream-1", additional_information=None,
                                       is_finished=lambda: self.done)

    def run(self, handoff: Any, frames: int, ending: str) -> int:
        """Speak `frames` frames, end as `ending` says; return the frames Code2Wav decodes."""
        payloads = []
        for n in range(frames):
            last = n == frames - 1 and ending == "on the last step"
            self.done = last
            payloads.append(handoff(self, {"codes": {"audio": [n] * 4}}, self.request, last))
        if ending != "on the last step":  # the talker reports the end after its last frame
            self.done = True
            payloads.append(handoff(self, None, self.request, True))
        if ending == "reported twice":
            payloads.append(handoff(self, None, self.request, True))
        sent = [p for p in payloads if p is not None]
        assert sent[-1].finished
        return sum(len(p.frames) - p.left_context_size for p in sent)


@pytest.mark.parametrize("ending", ["on the last step", "after the last step", "reported twice"])
@pytest.mark.parametrize("frames", [1, 24, 25, 50, 61, 250])
def test_a_streamed_answer_hands_each_frame_to_code2wav_once(
        monkeypatch: pytest.MonkeyPatch, frames: int, ending: str) -> None:
    """The stock processor (its windowing in tests/doubles/stock_handoff.py) decodes the last
    window again when the end comes after it; through Narrator's hand-off every frame of a
    streamed answer is decoded exactly once, however the talker reports the end."""
    from tests.doubles import stock_handoff
    from workers.engines.qwen3_handoff import talker2code2wav

    processors = ModuleType("vllm_omni.model_executor.stage_input_processors")
    processors.qwen3_tts = stock_handoff  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, processors.__name__, processors)
    monkeypatch.setitem(sys.modules, f"{processors.__name__}.qwen3_tts", stock_handoff)

    assert Talker().run(talker2code2wav, frames, ending) == frames
    stock = Talker().run(stock_handoff.talker2code2wav_async_chunk, frames, ending)
    repeats = ending == "reported twice" or (ending == "after the last step"
                                            and frames % stock_handoff.CHUNK == 0)
    assert (stock > frames) == repeats  # the double repeats where vLLM-Omni 0.26 does
