// Narrator console: plain ES module, no build step. Talks to the same API as any client.

const $ = (id) => document.getElementById(id);
const KEY = "narrator-api-key";

// ---- API access: the key lives in sessionStorage only; every error is shown in words ----

const FRIENDLY = {
  missing_api_key: "this server needs an API key",
  invalid_api_key: "that API key is not valid",
  rate_limit_exceeded: "too many requests for this key: wait a minute",
  too_many_active_jobs: "this key already has the most jobs it may run at once",
  daily_quota_exceeded: "this key used its characters for today",
  file_too_large: "the file is too large",
  invalid_epub: "that file is not a readable EPUB",
  consent_required: "the speaker's consent is required to clone a voice",
  consent_not_heard: "the recording does not say the consent statement",
  voice_disabled: "that voice's consent was deleted",
};

// The API's messages point API clients at endpoints; here they point at the console's tabs.
const IN_THE_CONSOLE = [
  [/send long text as an async job: POST \/v1\/audio\/jobs/, "use a job (the Jobs tab)"],
  [/upload one with POST \/v1\/audio\/voices/, "upload one (the Voices tab)"],
  [/replace it with PUT \S+/, "saving it again replaces it"],
  [/\s*\(see (GET|POST|PUT|DELETE) \/v1[^)]*\)/g, ""],
];

function inConsoleWords(message) {
  return IN_THE_CONSOLE.reduce((text, [pattern, words]) => text.replace(pattern, words),
                               String(message));
}

class ApiError extends Error {
  constructor(status, error) {
    super(FRIENDLY[error.code] ?? inConsoleWords(error.message));
    this.status = status;
    this.code = error.code;
  }
}

function headers(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

let asking = null;  // one dialog at a time, however many requests met a 401

function askForKey() {
  asking ??= promptForKey().finally(() => { asking = null; });
  return asking;
}

async function promptForKey() {
  const dialog = $("key-dialog");
  $("key-input").value = "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  const key = $("key-input").value.trim();
  if (key) sessionStorage.setItem(KEY, key);
  $("forget-key").hidden = !sessionStorage.getItem(KEY);
  return Boolean(key);
}

async function api(path, { method = "GET", json, form } = {}) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const init = { method, headers: headers(json ? { "Content-Type": "application/json" } : {}) };
    if (json) init.body = JSON.stringify(json);
    if (form) init.body = form;
    const response = await fetch(path, init);
    if (response.status === 401 && (await askForKey())) continue;
    if (!response.ok) {
      let error = { message: `${response.status} ${response.statusText}`, code: null };
      try { error = (await response.json()).error ?? error; } catch { /* not JSON */ }
      throw new ApiError(response.status, error);
    }
    return response;
  }
  throw new ApiError(401, { message: "an API key is needed", code: "missing_api_key" });
}

function showError(error) {
  const box = $("error");
  box.textContent = error ? String(error.message ?? error) : "";
  box.hidden = !error;
}

function say(text) { $("status").textContent = text; }

// Editing any field clears the error it may have caused: the banner never outlives its cause.
document.addEventListener("input", () => { if (!$("error").hidden) showError(null); });

async function guarded(button, work) {
  showError(null);
  button.disabled = true;
  try { await work(); } catch (error) { showError(error); } finally { button.disabled = false; }
}

// ---- Tabs: links with aria-selected; arrow keys move between them ----

const TABS = ["speak", "jobs", "voices"];

function showTab() {
  showError(null);  // an error belongs to the tab it happened in
  const current = TABS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "speak";
  for (const name of TABS) {
    $(name).hidden = name !== current;
    const tab = $(`tab-${name}`);
    tab.setAttribute("aria-selected", String(name === current));
    tab.tabIndex = name === current ? 0 : -1;
  }
  if (current === "jobs") refreshJobs();
  if (current === "voices") loadVoices();
}

document.querySelector('[role="tablist"]').addEventListener("keydown", (event) => {
  const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
  if (!step) return;
  const index = TABS.indexOf(location.hash.slice(1) || "speak");
  const next = TABS[(index + step + TABS.length) % TABS.length];
  location.hash = next;
  $(`tab-${next}`).focus();
});

// ---- Models and voices into the pickers ----

let models = [];
let voices = [];

async function loadCatalog() {
  models = (await (await api("/v1/models")).json()).data;
  voices = (await (await api("/v1/audio/voices")).json()).voices;
  for (const prefix of ["speak", "job"]) {
    const picker = $(`${prefix}-model`);
    picker.replaceChildren(...models.map((m) => new Option(`${m.id} (${m.engine})`, m.id)));
    picker.onchange = () => fillVoices(prefix);
    fillVoices(prefix);
  }
}

// ---- Pronunciation lexicons: pick one for speech and jobs; list and save them ----

function chosenLexicon(prefix) {
  const id = $(`${prefix}-lexicon`).value;
  return id ? { lexicons: [id] } : {};
}

async function loadLexicons() {
  const lexicons = (await (await api("/v1/audio/lexicons")).json()).data;
  for (const picker of document.querySelectorAll(".lexicon-picker")) {
    const kept = picker.value;
    picker.replaceChildren(new Option("none", ""),
      ...lexicons.map((l) => new Option(`${l.name} (${l.entry_count})`, l.id)));
    picker.value = lexicons.some((l) => l.id === kept) ? kept : "";
  }
  $("lexicon-table").tBodies[0].replaceChildren(...lexicons.map((l) => {
    const row = document.createElement("tr");
    for (const text of [l.name, String(l.entry_count), l.id]) {
      const td = document.createElement("td"); td.textContent = text; row.append(td);
    }
    return row;
  }));
}

function lexiconEntries(lines) {
  return lines.split("\n").filter((line) => line.includes("=")).map((line) => {
    const at = line.indexOf("=");
    const text = line.slice(0, at).trim();
    const said = line.slice(at + 1).trim();
    return said.length > 2 && said.startsWith("/") && said.endsWith("/")
      ? { text, ipa: said.slice(1, -1) } : { text, alias: said };
  });
}

$("lexicon-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded($("lexicon-go"), async () => {
    const name = $("lexicon-name").value.trim();
    const json = { name, entries: lexiconEntries($("lexicon-entries").value) };
    try {
      await api("/v1/audio/lexicons", { method: "POST", json });
    } catch (error) {
      if (error.status !== 409) throw error;
      await api(`/v1/audio/lexicons/${encodeURIComponent(name)}`, { method: "PUT", json });
    }
    say(`lexicon ${name} saved`);
    await loadLexicons();
  });
});

function fillVoices(prefix) {
  const model = $(`${prefix}-model`).value;
  $(`${prefix}-voice`).replaceChildren(...voices.filter((v) => v.model === model)
    .map((v) => new Option(v.kind === "uploaded" ? `${v.name} (uploaded)` : v.name, v.id)));
}

// ---- Speak: whole file, or 16-bit PCM played as it arrives ----

let lastUrl = null;

function offer(blob, name) {
  if (lastUrl) URL.revokeObjectURL(lastUrl);
  lastUrl = URL.createObjectURL(blob);
  const link = $("speak-download");
  link.href = lastUrl;
  link.download = name;
  link.hidden = false;
  return lastUrl;
}

function wavFile(chunks, rate) {
  const bytes = chunks.reduce((n, c) => n + c.length, 0);
  const view = new DataView(new ArrayBuffer(44));
  const text = (at, s) => [...s].forEach((ch, i) => view.setUint8(at + i, ch.charCodeAt(0)));
  text(0, "RIFF"); view.setUint32(4, 36 + bytes, true); text(8, "WAVE"); text(12, "fmt ");
  view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, rate, true); view.setUint32(28, rate * 2, true);
  view.setUint16(32, 2, true); view.setUint16(34, 16, true); text(36, "data");
  view.setUint32(40, bytes, true);
  return new Blob([view.buffer, ...chunks], { type: "audio/wav" });
}

// 16-bit mono PCM played as it arrives: each piece scheduled right after the one before.
class PcmPlayer {
  constructor(rate) {
    this.rate = rate;
    this.context = new AudioContext({ sampleRate: rate });
    this.at = this.context.currentTime + 0.05;
    this.carry = new Uint8Array(0);
    this.chunks = [];
  }

  get seconds() { return this.chunks.reduce((n, c) => n + c.length, 0) / 2 / this.rate; }

  play(value) {
    const data = new Uint8Array(this.carry.length + value.length);
    data.set(this.carry); data.set(value, this.carry.length);
    const usable = data.length - (data.length % 2);
    this.carry = data.slice(usable);
    if (!usable) return;
    const pcm = data.slice(0, usable);
    this.chunks.push(pcm);
    const samples = new Int16Array(pcm.buffer);
    const buffer = this.context.createBuffer(1, samples.length, this.rate);
    buffer.getChannelData(0).set(Float32Array.from(samples, (s) => s / 32768));
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    this.at = Math.max(this.at, this.context.currentTime);
    source.start(this.at);
    this.at += buffer.duration;
  }
}

async function speakStreamed(body) {
  const response = await api("/v1/audio/speech", {
    method: "POST", json: { ...body, response_format: "pcm", stream_format: "audio" } });
  const player = new PcmPlayer(Number(response.headers.get("X-Sample-Rate")));
  const reader = response.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    player.play(value);
    say(`playing: ${player.seconds.toFixed(1)} s received`);
  }
  const audio = $("speak-audio");
  audio.src = offer(wavFile(player.chunks, player.rate), "speech.wav");
  audio.hidden = false;
  say("done (streamed; the download is WAV)");
}

// ---- Type and hear: text streamed in over the WebSocket as it is typed ----
// Only what is appended is sent; each sentence is spoken once it ends, the rest on "Speak
// the rest". A browser cannot set headers on a WebSocket: the key goes as a subprotocol.

let typing = null;  // the open session: {socket, sent, player, open}

function openTyping() {
  const key = sessionStorage.getItem(KEY);
  const url = location.origin.replace(/^http/, "ws") + "/v1/audio/speech/stream";
  const socket = new WebSocket(url, key ? ["narrator", `narrator.bearer.${key}`] : []);
  socket.binaryType = "arraybuffer";
  const config = JSON.stringify({
    type: "session.config", model: $("speak-model").value || undefined,
    voice: $("speak-voice").value || undefined, speed: Number($("speak-speed").value),
    ...chosenLexicon("speak") });
  const session = { socket, sent: "", player: null, open: new Promise((resolve) => {
    socket.addEventListener("open", () => { socket.send(config); resolve(); }, { once: true });
  }) };  // the configuration goes first, before any text waiting on `open`
  socket.addEventListener("message", (message) => {
    if (typeof message.data !== "string") { session.player?.play(new Uint8Array(message.data)); return; }
    const event = JSON.parse(message.data);
    if (event.type === "sentence.start") {
      session.player ??= new PcmPlayer(event.sample_rate);
      $("live-said").textContent = `Speaking: ${event.text}`;
    } else if (event.type === "done") {
      $("live-said").textContent = `Spoken: ${event.sentences} sentence(s), ${event.audio_seconds.toFixed(1)} s`;
    } else if (event.type === "error" && event.error.code !== "session_idle") {
      showError(new ApiError(400, event.error));
    }
  });
  socket.addEventListener("close", () => { if (typing === session) typing = null; });
  return session;
}

$("live-text").addEventListener("input", async () => {
  const text = $("live-text").value;
  typing ??= openTyping();
  const session = typing;
  await session.open;
  const added = text.startsWith(session.sent) ? text.slice(session.sent.length) : "";
  session.sent = text;  // an edit before the end is not sent: what was spoken stays spoken
  if (added && session.socket.readyState === WebSocket.OPEN) {
    session.socket.send(JSON.stringify({ type: "text.delta", text: added }));
  }
});

$("live-done").addEventListener("click", () => {
  typing?.socket.send(JSON.stringify({ type: "session.close" }));
  typing = null;
  $("live-text").value = "";
});

async function speakWhole(body) {
  const response = await api("/v1/audio/speech", { method: "POST", json: body });
  const seconds = response.headers.get("X-Audio-Duration");
  const audio = $("speak-audio");
  audio.src = offer(await response.blob(), `speech.${body.response_format}`);
  audio.hidden = false;
  await audio.play().catch(() => {});  // autoplay may be refused; the controls are there
  say(`${Number(seconds).toFixed(1)} s of audio`);
}

$("speak-speed").addEventListener("input", (e) => {
  $("speak-speed-value").textContent = Number(e.target.value).toFixed(2);
});

$("speak-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const body = { model: $("speak-model").value, voice: $("speak-voice").value,
    input: $("speak-text").value, response_format: $("speak-format").value,
    speed: Number($("speak-speed").value), ...chosenLexicon("speak") };
  guarded($("speak-go"), () => ($("speak-stream").checked ? speakStreamed(body) : speakWhole(body)));
});

// ---- Jobs: preview chapters, submit, follow, cancel, delete, play ----

const kind = () => document.querySelector('input[name="job-kind"]:checked').value;

document.querySelectorAll('input[name="job-kind"]').forEach((radio) => {
  radio.addEventListener("change", () => {
    $("job-text-box").hidden = kind() === "epub";
    $("job-file-box").hidden = kind() !== "epub";
    $("job-chapters").replaceChildren();
  });
});

function jobRequest() {
  const fields = { model: $("job-model").value, voice: $("job-voice").value,
    response_format: $("job-format").value, speed: Number($("job-speed").value),
    subtitles: [["job-srt", "srt"], ["job-vtt", "vtt"], ["job-words", "words"]]
      .filter(([id]) => $(id).checked).map(([, kind]) => kind) };
  if ($("job-verify").value !== "off") fields.verify = $("job-verify").value;
  Object.assign(fields, chosenLexicon("job"));
  if ($("job-mastering").value !== "none") fields.mastering = $("job-mastering").value;
  const chapterVoices = Object.fromEntries([...document.querySelectorAll(".chapter-voice")]
    .filter((picker) => picker.value).map((picker) => [picker.dataset.chapter, picker.value]));
  if (Object.keys(chapterVoices).length) fields.chapter_voices = chapterVoices;
  const book = Object.fromEntries([["title", "job-title"], ["author", "job-author"]]
    .map(([name, id]) => [name, $(id).value.trim()]).filter(([, value]) => value));
  if (Object.keys(book).length) fields.book = book;
  const cover = $("job-cover").files[0];
  if (kind() !== "epub") Object.assign(fields, { input: $("job-text").value, input_format: kind() });
  if (kind() !== "epub" && !cover) return { json: fields };
  const form = new FormData();
  if (kind() === "epub") {
    const file = $("job-file").files[0];
    if (!file) throw new Error("choose an EPUB file first");
    form.append("file", file);
  }
  if (cover) form.append("cover", cover);
  form.append("request", JSON.stringify(fields));
  return { form };
}

$("job-text").addEventListener("input", () => $("job-chapters").replaceChildren());  // stale

$("job-preview").addEventListener("click", () => guarded($("job-preview"), async () => {
  const preview = await (await api("/v1/audio/jobs/preview", { method: "POST", ...jobRequest() })).json();
  const list = document.createElement("ol");
  const model = $("job-model").value;
  preview.chapters.forEach((chapter, n) => {
    const item = document.createElement("li");
    item.textContent = `${chapter.title ?? "(untitled)"}: ${chapter.characters.toLocaleString()} characters `;
    const picker = document.createElement("select");  // this chapter's voice
    picker.className = "chapter-voice";
    picker.dataset.chapter = String(n);
    picker.setAttribute("aria-label", `Voice of chapter ${n + 1}`);
    picker.append(new Option("job voice", ""), ...voices.filter((v) => v.model === model)
      .map((v) => new Option(v.name, v.id)));
    item.append(picker);
    list.append(item);
  });
  const head = document.createElement("p");
  head.textContent = `${preview.chapters.length} chapter(s), ${preview.input_characters.toLocaleString()} characters`;
  $("job-chapters").replaceChildren(head, list);
}));

$("job-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded($("job-submit"), async () => {
    const job = await (await api("/v1/audio/jobs", { method: "POST", ...jobRequest() })).json();
    say(`submitted ${job.id}`);
    await refreshJobs();
  });
});

function eta(seconds) {
  if (seconds == null) return "";
  const s = Math.round(seconds);
  return s < 60 ? `${s} s left` : `${Math.floor(s / 60)} min ${s % 60} s left`;
}

function button(label, action, name) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "quiet";
  b.textContent = label;
  b.setAttribute("aria-label", `${label} ${name}`);
  b.addEventListener("click", () => guarded(b, action));
  return b;
}

let polling = null;

async function refreshJobs() {
  clearTimeout(polling);
  try {
    const page = await (await api("/v1/audio/jobs?limit=25")).json();
    const rows = page.data.map((job) => {
      const row = document.createElement("tr");
      row.dataset.job = job.id;
      const cells = [jobLabel(job), job.version > 1 ? `${job.status} (v${job.version})` : job.status, "", new Date(job.created_at * 1000).toLocaleString(), ""]
        .map((text) => { const td = document.createElement("td"); td.textContent = text; return td; });
      const bar = document.createElement("progress");
      bar.max = 100; bar.value = job.progress;
      bar.setAttribute("aria-label", `progress of ${job.id}`);
      cells[2].append(bar, ` ${job.progress}% ${eta(job.eta_seconds)}`);
      if (job.status === "completed") cells[4].append(button("Play", () => openPlayer(job), job.id));
      if (job.status === "in_progress" && job.stream_url) {
        cells[4].append(button("Listen", () => listen(job), job.id));
      }
      if (["queued", "in_progress"].includes(job.status)) {
        cells[4].append(button("Cancel", async () => {
          await api(`/v1/audio/jobs/${job.id}/cancel`, { method: "POST" }); await refreshJobs();
        }, job.id));
      }
      if (job.status === "failed" && job.segments.total) {
        cells[4].append(button("Retry", async () => {
          await api(`/v1/audio/jobs/${job.id}/retry`, { method: "POST" }); await refreshJobs();
        }, job.id));
      }
      cells[4].append(button("Delete", async () => {
        await api(`/v1/audio/jobs/${job.id}`, { method: "DELETE" });
        if ($("player").dataset.job === job.id) $("player").hidden = true;
        await refreshJobs();
      }, job.id));
      if (job.status === "failed" && job.error) cells[1].title = job.error.message;
      row.append(...cells);
      return row;
    });
    $("job-table").tBodies[0].replaceChildren(...rows);
    const active = page.data.some((job) => ["queued", "in_progress"].includes(job.status));
    if (!$("jobs").hidden) polling = setTimeout(refreshJobs, active ? 1500 : 5000);
  } catch (error) {
    showError(error);
  }
}

// A job is named by its title where it has one (the book's, or its metadata's), else its id.
function jobLabel(job) {
  const title = job.book?.title ?? job.metadata?.title ?? job.result?.chapters?.[0]?.title;
  return title ? String(title) : job.id.slice(0, 16) + "…";
}

// ---- Player: chapters, subtitles in sync, downloads ----

const sameOrigin = (url) => new URL(url, location.href).origin === location.origin;

// The API's own URLs get the key; others (presigned S3, a CDN) must not.
async function fetchAny(url) {
  if (sameOrigin(url)) return api(url);
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status} ${response.statusText}`);
  return response;
}

async function mediaUrl(url) {
  // Same-origin content URLs need the key in a header, which <audio src> cannot send.
  if (!sessionStorage.getItem(KEY) || !sameOrigin(url)) return url;
  return URL.createObjectURL(await (await api(url)).blob());
}

function parseVtt(text) {
  const seconds = (t) => t.split(":").reduce((acc, part) => acc * 60 + Number(part), 0);
  const cues = [];
  for (const block of text.replace(/\r/g, "").split("\n\n")) {
    const lines = block.split("\n");
    const timing = lines.findIndex((l) => l.includes("-->"));
    if (timing < 0) continue;
    const [start, end] = lines[timing].split("-->").map((t) => seconds(t.trim().split(" ")[0]));
    cues.push({ start, end, text: lines.slice(timing + 1).join(" ") });
  }
  return cues;
}

// The cue under the play head, word by word where the job has word times: the written
// words where they match the spoken ones one for one ("dawn."), else the words as spoken
// ("three forty five p m" for "3:45 p.m."). Each word is lit from its start until the next
// one starts, so the light does not blink off in the pauses between words.
function showCue(cue, words) {
  const box = $("player-cue");
  const spoken = words.filter((w) => w.start >= cue.start - 0.001 && w.end <= cue.end + 0.001);
  if (!spoken.length) { box.textContent = cue.text; return; }
  const written = cue.text.split(/\s+/).filter(Boolean);
  const shown = written.length === spoken.length ? written : spoken.map((w) => w.word);
  box.replaceChildren(...shown.flatMap((text, n) => {
    const span = document.createElement("span");
    span.textContent = text;
    span.dataset.start = spoken[n].start;
    span.dataset.end = n + 1 < spoken.length ? spoken[n + 1].start : spoken[n].end;
    return n ? [" ", span] : [span];
  }));
}

async function openPlayer(job) {
  const player = $("player");
  player.dataset.job = job.id;
  const audio = $("player-audio");
  audio.src = await mediaUrl(job.result.url);
  const heard = job.result.verification;  // verify "flag" or "retry": what was heard back
  $("player-verify").hidden = !heard;
  if (heard) {
    const misheard = heard.flagged.length
      ? `misheard segments: ${heard.flagged.map((n) => n + 1).join(", ")}` : "no segment misheard";
    $("player-verify").textContent = `Heard back: ${misheard} (median word error rate `
      + `${(heard.median_wer ?? 0).toFixed(2)})`;
  }
  const chapters = job.result.chapters ?? [];
  $("player-chapters").replaceChildren(...chapters.map((chapter, n) => {
    const item = document.createElement("li");
    const go = document.createElement("button");
    go.type = "button";
    go.textContent = chapter.title ?? `Chapter ${n + 1}`;
    go.addEventListener("click", () => { audio.currentTime = chapter.start_seconds; audio.play(); });
    const again = document.createElement("button");  // this chapter synthesised again: v+1
    again.type = "button";
    again.textContent = "Re-render";
    again.setAttribute("aria-label", `Re-render chapter ${n + 1}`);
    again.addEventListener("click", () => guarded(again, async () => {
      const title = chapter.title ?? `chapter ${n + 1}`;
      if (!confirm(`Synthesise "${title}" again? The job becomes version ${(job.version ?? 1) + 1}; `
                   + "the current version stays downloadable.")) return;
      const job2 = await (await api(`/v1/audio/jobs/${job.id}/rerender`, {
        method: "POST", json: { chapters: [n] } })).json();
      say(`re-rendering chapter ${n + 1} of ${job.id} as version ${job2.version}`);
      await refreshJobs();
    }));
    item.append(go, " ", again);
    return item;
  }));
  let cues = [];
  if (job.result.subtitles?.vtt) {
    cues = parseVtt(await (await fetchAny(job.result.subtitles.vtt)).text());
  }
  let words = [];  // aligned word times (subtitles "words"), in the book's time
  if (job.result.subtitles?.words) {
    words = (await (await fetchAny(job.result.subtitles.words)).json()).words;
  }
  $("player-cues").replaceChildren(...cues.map((cue) => {
    const item = document.createElement("li");
    item.textContent = cue.text;
    item.tabIndex = 0;
    const seek = () => { audio.currentTime = cue.start + 0.01; };
    item.addEventListener("click", seek);
    item.addEventListener("keydown", (e) => { if (e.key === "Enter") seek(); });
    return item;
  }));
  const update = () => {
    const t = audio.currentTime;
    const items = $("player-cues").children;
    cues.forEach((cue, n) => {
      const on = t >= cue.start && t < cue.end;
      if (on && !items[n].classList.contains("current")) {
        items[n].scrollIntoView({ block: "nearest" });
        showCue(cue, words);
      }
      items[n].classList.toggle("current", on);
    });
    for (const word of $("player-cue").children) {
      word.classList.toggle("current-word",
        t >= Number(word.dataset.start) && t < Number(word.dataset.end));
    }
    const chapterItems = $("player-chapters").children;
    chapters.forEach((chapter, n) => chapterItems[n].classList.toggle("current",
      t >= chapter.start_seconds && t < chapter.start_seconds + chapter.duration_seconds));
  };
  audio.ontimeupdate = update;
  audio.onplay = () => {  // timeupdate comes 4 times a second: words need every frame
    const tick = () => { update(); if (!audio.paused) requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
  };
  const links = [["Audio", job.result.url, `${job.id}.${job.response_format}`],
    ...chapters.map((c, n) => [`Chapter ${n + 1}${c.title ? `: ${c.title}` : ""}`, c.url, `${job.id}-${n + 1}`]),
    ...Object.entries(job.result.subtitles ?? {}).map(([k, url]) => k === "words"
      ? ["Word timings (JSON)", url, `${job.id}.words.json`]
      : [`Subtitles (${k.toUpperCase()})`, url, `${job.id}.${k}`]),
    ["Manifest (JSON)", job.result.manifest_url, `${job.id}.json`],
    ...(job.versions ?? []).map((v) => [`Version ${v.version} (earlier)`, v.url,
      `${job.id}.v${v.version}.${job.response_format}`])];
  $("player-downloads").replaceChildren(...links.filter(([, url]) => url).map(([label, url, name]) => {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.textContent = label;
    link.href = url;
    link.download = name;
    if (sessionStorage.getItem(KEY) && sameOrigin(url)) {
      link.addEventListener("click", async (event) => {  // the key goes in a header
        event.preventDefault();
        const blob = await (await api(url)).blob();
        const temp = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: name });
        temp.click();
      });
    }
    item.append(link);
    return item;
  }));
  $("player-title").textContent = `Player: ${jobLabel(job)}`;
  $("player-version").textContent = job.version > 1
    ? `Version ${job.version}; earlier versions are in the downloads` : "Version 1";
  player.hidden = false;
  player.scrollIntoView({ block: "start" });
}

// ---- Listening while a book is made: its HLS stream, fed to Media Source Extensions ----
// The playlist is read again every few seconds and each new fragment (MP3, or ADTS AAC for
// m4b) is appended in order; at most two minutes are fetched ahead of the play head, and
// what was played is let go, so a long book never fills the browser's buffer. A browser
// without Media Source Extensions for the format (iOS Safari) plays the playlist itself
// where no key is needed. Neither hls.js 1.7 nor Chromium 156's own HLS player could play
// these MPEG-2 Layer III fragments (Piper's 22.05 kHz); Chromium's MSE takes them as they are.

let listening = null;  // the session of the job being listened to: {stopped}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const once = (target, name) => new Promise((resolve) => target.addEventListener(name, resolve, { once: true }));

async function listen(job) {
  if (listening) listening.stopped = true;
  const session = listening = { stopped: false };
  const audio = $("live-audio");
  $("live-title").textContent = `Listening: ${jobLabel(job)}`;
  $("live-state").textContent = "What is made so far; it grows as the job runs.";
  $("live").hidden = false;
  $("live").scrollIntoView({ block: "start" });
  const type = job.response_format === "m4b" ? "audio/aac" : "audio/mpeg";
  if (!window.MediaSource?.isTypeSupported(type)) {
    if (sessionStorage.getItem(KEY) || !audio.canPlayType("application/vnd.apple.mpegurl")) {
      throw new Error("this browser cannot play the stream");
    }
    audio.src = job.stream_url;  // iOS Safari plays HLS itself (it cannot send a key)
    await audio.play().catch(() => {});
    return;
  }
  const source = new MediaSource();
  audio.src = URL.createObjectURL(source);
  await once(source, "sourceopen");
  const buffer = source.addSourceBuffer(type);
  buffer.mode = "sequence";
  let appended = 0, started = false;
  const ahead = () => (buffer.buffered.length ? buffer.buffered.end(buffer.buffered.length - 1) : 0) - audio.currentTime;
  while (!session.stopped) {
    const text = await (await api(job.stream_url)).text();
    const uris = text.split("\n").filter((line) => line && !line.startsWith("#"));
    for (const uri of uris.slice(appended)) {
      while (ahead() > 120 && !session.stopped) await sleep(2000);  // two minutes ahead
      const data = await (await api(new URL(uri, job.stream_url).href)).arrayBuffer();
      if (session.stopped) return;
      if (audio.currentTime > 60) {  // let go of what was played
        buffer.remove(0, audio.currentTime - 30);
        await once(buffer, "updateend");
      }
      buffer.appendBuffer(data);
      await once(buffer, "updateend");
      appended += 1;
      if (!started) { started = true; await audio.play().catch(() => {}); }
    }
    if (text.includes("#EXT-X-ENDLIST")) {
      source.endOfStream();
      $("live-state").textContent = "The whole book is here.";
      return;
    }
    await sleep(3000);
  }
}

// ---- Voices: list, and upload a clip where a model clones ----

async function loadConsents() {
  const [statement, listed] = await Promise.all([
    api("/v1/audio/voice_consents/statement").then((r) => r.json()),
    api("/v1/audio/voice_consents?limit=100").then((r) => r.json())]);
  $("consent-statement").textContent = statement.statement;
  $("consent-table").tBodies[0].replaceChildren(...listed.data.map((c) => {
    const row = document.createElement("tr");
    row.dataset.consent = c.id;
    const heard = `${Math.round(100 * (1 - c.word_error_rate))} % of the statement`;
    for (const text of [c.name, heard, c.id]) {
      const td = document.createElement("td"); td.textContent = text; row.append(td);
    }
    const remove = document.createElement("button");
    remove.type = "button"; remove.textContent = "Delete";
    remove.setAttribute("aria-label", `Delete the consent of ${c.name}`);
    remove.onclick = () => guarded(remove, async () => {
      const gone = await (await api(`/v1/audio/voice_consents/${c.id}`,
                                    { method: "DELETE" })).json();
      say(`consent of ${c.name} deleted; ${gone.voices_disabled} voice(s) disabled`);
      await loadVoices();
    });
    const cell = document.createElement("td"); cell.append(remove); row.append(cell);
    return row;
  }));
  $("voice-consent").replaceChildren(...listed.data.map((c) => {
    const option = document.createElement("option");
    option.value = c.id; option.textContent = c.name;
    return option;
  }));
  return listed.data.length;
}

async function loadVoices() {
  try {
    const [consents] = await Promise.all([loadConsents(), loadCatalog(), loadLexicons()]);
    $("voice-table").tBodies[0].replaceChildren(...voices.map((v) => {
      const row = document.createElement("tr");
      for (const text of [v.name, v.model, v.languages.join(", "),
                          v.disabled ? `${v.kind}, disabled (no consent)` : v.kind]) {
        const td = document.createElement("td"); td.textContent = text; row.append(td);
      }
      const hear = document.createElement("button");
      hear.type = "button"; hear.textContent = "Hear";
      hear.setAttribute("aria-label", `Hear a sample of ${v.name}`);
      hear.onclick = () => guarded(hear, () => playSample(v));
      const cell = document.createElement("td"); cell.append(hear); row.append(cell);
      return row;
    }));
    const cloners = models.filter((m) => m.task_type === "Base");
    $("voice-note").textContent = !cloners.length
      ? "No model here clones voices (that needs a Qwen3-TTS Base checkpoint), so uploads are refused."
      : consents ? `Uploaded voices work with ${cloners.map((m) => m.id).join(", ")}.`
        : "Add the speaker's consent above first.";
    $("voice-go").disabled = !cloners.length || !consents;
  } catch (error) {
    showError(error);
  }
}

// A short sample, made when asked for (nothing is stored): a sentence in the voice's
// first language where one is known, else in English.
const SAMPLES = { ja: "こんにちは。この声で読み上げます。" };

async function playSample(voice) {
  const language = (voice.languages[0] || "en").toLowerCase().split("-")[0];
  const input = SAMPLES[language] || `Hello, this is ${voice.name.split(" (")[0]}.`;
  const response = await api("/v1/audio/speech", { method: "POST", json: {
    model: voice.model, voice: voice.id, input, response_format: "mp3" } });
  const url = URL.createObjectURL(await response.blob());
  const audio = new Audio(url);
  audio.onended = () => URL.revokeObjectURL(url);
  await audio.play();
  say(`Playing a sample of ${voice.name}`);
}

$("voice-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded($("voice-go"), async () => {
    const form = new FormData();
    form.append("audio_sample", $("voice-file").files[0]);
    form.append("name", $("voice-name").value);
    form.append("consent", $("voice-consent").value);
    if ($("voice-ref").value) form.append("ref_text", $("voice-ref").value);
    await api("/v1/audio/voices", { method: "POST", form });
    say("voice uploaded");
    await loadVoices();
  });
});

$("consent-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded($("consent-go"), async () => {
    const form = new FormData();
    form.append("recording", $("consent-file").files[0]);
    form.append("name", $("consent-name").value);
    form.append("language", "en");
    await api("/v1/audio/voice_consents", { method: "POST", form });
    say(`consent of ${$("consent-name").value} added`);
    await loadVoices();
  });
});

$("forget-key").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  $("forget-key").hidden = true;
  say("API key forgotten");
});

window.addEventListener("hashchange", showTab);
$("forget-key").hidden = !sessionStorage.getItem(KEY);
showTab();
loadCatalog().catch(showError);
loadLexicons().catch(showError);
