// LangChain JS (@langchain/openai ChatOpenAI, useResponsesApi: true) with
// the native tool bound: mode history sends the messages so far (the
// AIMessages as received, or the streamed chunks concatenated); mode
// previous_response_id sends the new message with previous_response_id.
// include: the call option include: ["code_interpreter_call.outputs"].
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage } from '@langchain/core/messages';
import { apiKey, baseURL, call, model, prompts, run, variant } from './common.mjs';

const llm = new ChatOpenAI({
  model,
  apiKey,
  configuration: { baseURL },
  useResponsesApi: true,
  maxRetries: 0,
  ...(variant.store === false ? { zdrEnabled: true } : {}),
}).bindTools([{ type: 'code_interpreter', container: { type: 'auto' } }]);

await run('langchain', async () => {
  const turns = [];
  const messages = [];
  let prevID;
  for (const prompt of prompts) {
    const options = {};
    if (variant.include) options.include = ['code_interpreter_call.outputs'];
    let input;
    if (variant.mode === 'previous_response_id') {
      input = [new HumanMessage(prompt)];
      if (prevID) options.previous_response_id = prevID;
    } else {
      messages.push(new HumanMessage(prompt));
      input = messages;
    }
    let msg;
    if (variant.stream) {
      for await (const chunk of await llm.stream(input, options)) msg = msg ? msg.concat(chunk) : chunk;
    } else {
      msg = await llm.invoke(input, options);
    }
    if (variant.mode !== 'previous_response_id') messages.push(msg);
    prevID = msg.response_metadata?.id ?? msg.id;
    const items = msg.response_metadata?.output?.length ? msg.response_metadata.output : (msg.additional_kwargs?.tool_outputs ?? []);
    const calls = items.filter((it) => it.type === 'code_interpreter_call').map(call);
    turns.push({ response_id: prevID ?? null, calls, text: msg.text });
  }
  return turns;
});
