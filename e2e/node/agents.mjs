// The OpenAI Agents SDK (@openai/agents) with codeInterpreterTool():
// mode history replays result.history plus the next user message (the
// SDK's documented way to go on); mode previous_response_id passes
// result.lastResponseId. include: codeInterpreterTool({includeOutputs: true}).
import OpenAI from 'openai';
import { Agent, codeInterpreterTool, run as runAgent, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';
import { apiKey, baseURL, call, model, prompts, run, variant } from './common.mjs';

setTracingDisabled(true);
setOpenAIAPI('responses');
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 }));

const agent = new Agent({
  name: 'Calculator',
  instructions: 'Use the code interpreter for computations.',
  model,
  tools: [codeInterpreterTool(variant.include ? { includeOutputs: true } : {})],
  ...(variant.store !== undefined ? { modelSettings: { store: variant.store } } : {}),
});

await run('agents', async () => {
  const turns = [];
  let history = [];
  let prev;
  for (const prompt of prompts) {
    let input = prompt;
    const options = { stream: !!variant.stream };
    if (variant.mode === 'previous_response_id') {
      if (prev) options.previousResponseId = prev.lastResponseId;
    } else {
      input = [...history, { role: 'user', content: prompt }];
    }
    const result = await runAgent(agent, input, options);
    if (variant.stream) {
      for await (const _ of result) { /* consume the events */ }
      await result.completed;
      if (result.error) throw result.error;
    }
    history = result.history;
    prev = result;
    const calls = result.newItems
      .filter((it) => it.type === 'tool_call_item' && it.rawItem.type === 'hosted_tool_call' && it.rawItem.name === 'code_interpreter_call')
      .map((it) => call({
        id: it.rawItem.id,
        code: it.rawItem.providerData?.code,
        status: it.rawItem.status,
        outputs: it.rawItem.providerData?.outputs,
      }));
    turns.push({ response_id: result.lastResponseId ?? null, calls, text: result.finalOutput ?? '' });
  }
  return turns;
});
