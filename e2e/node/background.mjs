// openai-node (the `openai` package) in background mode, across two
// replicas: created on A, polled, resumed and cancelled through B.
//
// Environment (set by e2e/background_test.go): OPENAI_BASE_URL (replica
// A's /v1), BASE_URL_B (replica B's /v1), OPENAI_API_KEY, and the prompts
// the scripted model answers: QUICK (a short run), STREAM (a run printing
// three lines), SLOW (a cell that sleeps).
//
// Prints one JSON document: {poll, stream, cancel, cancelAgain} and exits 1
// on any SDK error.
import OpenAI from 'openai';

const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run by e2e/background_test.go)`);
  return v;
};
const apiKey = need('OPENAI_API_KEY');
const a = new OpenAI({ baseURL: need('OPENAI_BASE_URL'), apiKey, maxRetries: 0, timeout: 120_000 });
const b = new OpenAI({ baseURL: need('BASE_URL_B'), apiKey, maxRetries: 0, timeout: 120_000 });
const params = (input) => ({
  model: 'gpt-4.1',
  input,
  background: true,
  store: true,
  tools: [{ type: 'code_interpreter', container: { type: 'auto' } }],
  include: ['code_interpreter_call.outputs'],
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const settle = async (client, id, done) => {
  for (let i = 0; i < 900; i++) {
    const r = await client.responses.retrieve(id, { include: ['code_interpreter_call.outputs'] });
    if (done(r)) return r;
    await sleep(100);
  }
  throw new Error(`${id} did not settle`);
};
const ended = (r) => r.status !== 'queued' && r.status !== 'in_progress';

try {
  // Created on A, polled on B.
  const queued = await a.responses.create(params('QUICK'));
  const polled = await settle(b, queued.id, ended);
  const poll = {
    queued_status: queued.status,
    background: queued.background,
    status: polled.status,
    text: polled.output_text,
    call_logs: polled.output.filter((it) => it.type === 'code_interpreter_call').map((c) => (c.outputs ?? []).map((o) => o.logs).join('')),
  };

  // A stream on A dropped after four events, resumed on B from the last
  // sequence_number; then the whole stream again on B.
  const first = [];
  const ac = new AbortController();
  const s1 = await a.responses.create({ ...params('STREAM'), stream: true }, { signal: ac.signal });
  try {
    for await (const e of s1) {
      first.push(e);
      if (first.length === 4) {
        ac.abort();
        break;
      }
    }
  } catch (err) {
    if (!ac.signal.aborted) throw err;
  }
  const id = first[0].response.id;
  const joined = [...first];
  const s2 = await b.responses.retrieve(id, { stream: true, starting_after: first[first.length - 1].sequence_number });
  for await (const e of s2) joined.push(e);
  const whole = [];
  const s3 = await b.responses.retrieve(id, { stream: true });
  for await (const e of s3) whole.push(e);
  const stream = {
    types: joined.map((e) => e.type),
    seqs: joined.map((e) => e.sequence_number),
    equal: JSON.stringify(joined) === JSON.stringify(whole),
    // (The SDK adds output_text to whole responses, not to events' ones.)
    final_text: (joined[joined.length - 1].response?.output ?? [])
      .filter((it) => it.type === 'message')
      .flatMap((m) => m.content.map((c) => c.text ?? ''))
      .join(''),
  };

  // Cancelled through B during a run on A.
  const slow = await a.responses.create(params('SLOW'));
  await settle(b, slow.id, (r) => r.status === 'in_progress');
  await sleep(2000);
  const cancelled = await b.responses.cancel(slow.id);
  const again = await a.responses.cancel(slow.id);
  const finished = await b.responses.cancel(queued.id);

  process.stdout.write(JSON.stringify({
    poll,
    stream,
    cancel: { status: cancelled.status, again: again.status, finished: finished.status },
  }));
} catch (err) {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
}
