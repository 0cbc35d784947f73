// What every client script shares: the environment the Go test gives it,
// a log of every request the SDK sends, and one JSON report on stdout.
//
// Environment (set by e2e/node_test.go):
//   OPENAI_BASE_URL  the front proxy's /v1 (devproxy → ext_proc → scripted model)
//   OPENAI_API_KEY   the test key the scripted model checks
//   PROMPTS          a JSON array of the three user messages, in order
//   VARIANT          a JSON object: {stream, mode, include, store}
//                    mode: "previous_response_id" | "history" (each SDK's own replay)
//   MODEL            the model name sent
//   CLIENT_LOG       a file: one JSON line per request the SDK sent
//                    ({method, url, body}), for the test's messages
//
// The script prints one JSON document:
//   {"client": …, "variant": …, "turns": [{"response_id", "calls": [{"id",
//    "code", "status", "outputs"}], "text"}]}
// and exits 1 (printing the error to stderr) on any SDK error.
import { appendFileSync } from 'node:fs';

export const baseURL = need('OPENAI_BASE_URL');
export const apiKey = need('OPENAI_API_KEY');
export const prompts = JSON.parse(need('PROMPTS'));
export const variant = JSON.parse(need('VARIANT'));
export const model = process.env.MODEL || 'gpt-4.1';

if (!Array.isArray(prompts) || prompts.length !== 3) {
  fail(new Error('PROMPTS must be a JSON array of three messages'));
}

function need(name) {
  const v = process.env[name];
  if (!v) fail(new Error(`${name} is not set (run by e2e/node_test.go)`));
  return v;
}

// Every SDK here sends with the global fetch (openai-node picks it up when
// a client is made, the AI SDK on each call): record what it sends.
const log = process.env.CLIENT_LOG;
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  if (log) {
    const url = typeof input === 'string' ? input : input.url ?? String(input);
    let body = init.body;
    if (typeof body !== 'string') body = body == null ? null : '(not a string)';
    appendFileSync(log, JSON.stringify({ method: init.method ?? 'GET', url, body }) + '\n');
  }
  return realFetch(input, init);
};

export function fail(err) {
  process.stderr.write(`SDK error: ${err?.stack ?? err}\n`);
  if (err?.status) process.stderr.write(`status: ${err.status}\n`);
  if (err?.error) process.stderr.write(`error body: ${JSON.stringify(err.error)}\n`);
  if (err?.responseBody) process.stderr.write(`response body: ${err.responseBody}\n`);
  if (err?.issues) process.stderr.write(`issues: ${JSON.stringify(err.issues)}\n`);
  process.exit(1);
}

// call is the normalised view of one code_interpreter_call the client decoded.
export function call({ id, code, status, outputs }) {
  return { id: id ?? null, code: code ?? null, status: status ?? null, outputs: outputs ?? null };
}

// run runs main (which returns the per-turn reports) and prints the report.
export async function run(client, main) {
  try {
    const turns = await main();
    process.stdout.write(JSON.stringify({ client, variant, turns }, null, 1) + '\n');
  } catch (err) {
    fail(err);
  }
}
