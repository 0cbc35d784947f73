// openai-node (the `openai` package): client.responses over three turns.
// mode previous_response_id: each turn names the last one's id;
// mode history: each turn sends the conversation so far, the earlier
// responses' output items as they were received (OpenAI's documented way).
import OpenAI from 'openai';
import { apiKey, baseURL, call, model, prompts, run, variant } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });

await run('openai', async () => {
  const turns = [];
  let history = [];
  let prev = null;
  for (const prompt of prompts) {
    const params = {
      model,
      tools: [{ type: 'code_interpreter', container: { type: 'auto' } }],
      ...(variant.include ? { include: ['code_interpreter_call.outputs'] } : {}),
      ...(variant.store !== undefined ? { store: variant.store } : {}),
    };
    if (variant.mode === 'previous_response_id') {
      params.input = prompt;
      if (prev) params.previous_response_id = prev.id;
    } else {
      history.push({ role: 'user', content: prompt });
      params.input = history;
    }
    let resp;
    if (variant.stream) {
      const stream = client.responses.stream(params);
      resp = await stream.finalResponse();
    } else {
      resp = await client.responses.create(params);
    }
    if (variant.mode !== 'previous_response_id') history = [...history, ...resp.output];
    prev = resp;
    turns.push({
      response_id: resp.id,
      calls: resp.output.filter((it) => it.type === 'code_interpreter_call').map(call),
      text: resp.output_text,
    });
  }
  return turns;
});
