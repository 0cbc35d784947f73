// The AI SDK (`ai` + `@ai-sdk/openai`) with openai.tools.codeInterpreter():
// mode history appends result.response.messages to the messages (the SDK's
// documented way to go on); with its default store: true it replays the
// earlier code calls and answers as item_reference items. Mode
// previous_response_id sends only the new message with
// providerOptions.openai.previousResponseId. The SDK always asks for the
// calls' outputs.
import { generateText, streamText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { apiKey, baseURL, call, model, prompts, run, variant } from './common.mjs';

const openai = createOpenAI({ baseURL, apiKey });

await run('ai-sdk', async () => {
  const turns = [];
  const messages = [];
  let prevID;
  for (const prompt of prompts) {
    const providerOptions = { openai: {} };
    if (variant.store !== undefined) providerOptions.openai.store = variant.store;
    let input;
    if (variant.mode === 'previous_response_id') {
      input = [{ role: 'user', content: prompt }];
      if (prevID) providerOptions.openai.previousResponseId = prevID;
    } else {
      messages.push({ role: 'user', content: prompt });
      input = messages;
    }
    const params = {
      model: openai.responses(model),
      tools: { code_interpreter: openai.tools.codeInterpreter() },
      messages: input,
      providerOptions,
      maxRetries: 0,
    };
    let content, response, text, providerMetadata;
    if (variant.stream) {
      let streamErr;
      const r = streamText({ ...params, onError: ({ error }) => { streamErr ??= error; } });
      await r.consumeStream();
      if (streamErr) throw streamErr;
      [content, response, text, providerMetadata] = await Promise.all([r.content, r.response, r.text, r.providerMetadata]);
    } else {
      const r = await generateText(params);
      ({ content, response, text, providerMetadata } = r);
    }
    if (variant.mode !== 'previous_response_id') messages.push(...response.messages);
    prevID = providerMetadata?.openai?.responseId ?? response.id;
    const results = new Map(content.filter((p) => p.type === 'tool-result').map((p) => [p.toolCallId, p]));
    const calls = content
      .filter((p) => p.type === 'tool-call' && p.toolName === 'code_interpreter')
      .map((p) => {
        const input = typeof p.input === 'string' ? JSON.parse(p.input) : p.input;
        const res = results.get(p.toolCallId);
        // The SDK keeps no status of a hosted call: a result means it ended.
        return call({ id: p.toolCallId, code: input?.code, status: null, outputs: res?.output?.outputs ?? res?.result?.outputs });
      });
    turns.push({ response_id: prevID, calls, text });
  }
  return turns;
});
