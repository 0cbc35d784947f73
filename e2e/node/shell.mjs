// The hosted shell (issue 39) through the official JS clients, three turns
// (a shell command, a Python cell, a shell command) on one container:
//   VARIANT.mode "openai": the OpenAI Node SDK, turn 1 streamed (each
//     event as the SDK parsed it), turns 2 and 3 by previous_response_id;
//   VARIANT.mode "agents": @openai/agents with shellTool({environment:
//     {type: 'container_auto'}}) beside codeInterpreterTool(), replaying
//     result.history as the SDK documents.
// Each turn reports the shell items the client decoded and its text; the
// openai mode also reports the stream's events.
import OpenAI from 'openai';
import { Agent, codeInterpreterTool, run as runAgent, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, shellTool } from '@openai/agents';
import { apiKey, baseURL, model, prompts, run, variant } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });
const tools = [
  { type: 'code_interpreter', container: { type: 'auto' } },
  { type: 'shell', environment: { type: 'container_auto' } },
];

// shellItems: the shell_call and shell_call_output items of an output list.
function shellItems(output) {
  return output
    .filter((it) => it.type === 'shell_call' || it.type === 'shell_call_output')
    .map((it) => it.type === 'shell_call'
      ? { type: it.type, call_id: it.call_id, commands: it.action?.commands ?? null, status: it.status, environment: it.environment ?? null }
      : { type: it.type, call_id: it.call_id, status: it.status, output: it.output ?? null });
}

async function withOpenAI() {
  const turns = [];
  let prev;
  for (const [k, prompt] of prompts.entries()) {
    const params = { model, tools, input: prompt, ...(prev ? { previous_response_id: prev } : {}) };
    let response;
    const events = [];
    if (k === 0) {
      const stream = await client.responses.create({ ...params, stream: true });
      for await (const ev of stream) {
        if (ev.type.startsWith('response.shell_call') || (ev.type.startsWith('response.output_item.') && ev.item.type.startsWith('shell_call'))) {
          events.push({ type: ev.type, output_index: ev.output_index, command_index: ev.command_index ?? null, item_id: ev.item_id ?? null,
            delta: ev.delta ?? null, command: ev.command ?? null, output: ev.output ?? null, item_type: ev.item?.type ?? null });
        }
        if (ev.type === 'response.completed') response = ev.response;
      }
    } else {
      response = await client.responses.create(params);
    }
    prev = response.id;
    turns.push({ response_id: response.id, calls: shellItems(response.output), text: response.output_text ?? '', events });
  }
  return turns;
}

async function withAgents() {
  setTracingDisabled(true);
  setOpenAIAPI('responses');
  setDefaultOpenAIClient(client);
  const agent = new Agent({
    name: 'Operator',
    instructions: 'Use the shell and the code interpreter.',
    model,
    tools: [codeInterpreterTool(), shellTool({ environment: { type: 'container_auto' } })],
  });
  const turns = [];
  let history = [];
  for (const prompt of prompts) {
    const result = await runAgent(agent, [...history, { role: 'user', content: prompt }]);
    history = result.history;
    // The SDK's own items (camelCase: callId, exitCode), in the wire's
    // words for the report.
    const calls = result.newItems.map((it) => it.rawItem)
      .filter((it) => it?.type === 'shell_call' || it?.type === 'shell_call_output')
      .map((it) => it.type === 'shell_call'
        ? { type: it.type, call_id: it.callId, commands: it.action?.commands ?? null, status: it.status,
            environment: it.environment ?? it.providerData?.environment ?? null }
        : { type: it.type, call_id: it.callId, status: it.status,
            output: (it.output ?? []).map((o) => ({ stdout: o.stdout, stderr: o.stderr,
              outcome: { type: o.outcome?.type, exit_code: o.outcome?.exitCode ?? o.outcome?.exit_code } })) });
    turns.push({ response_id: result.lastResponseId ?? null, calls, text: result.finalOutput ?? '', events: [] });
  }
  return turns;
}

await run(variant.mode, variant.mode === 'agents' ? withAgents : withOpenAI);
