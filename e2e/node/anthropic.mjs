// Anthropic's official TypeScript SDK against codeinterp's /v1/messages
// (run by e2e/messages_test.go): messages.create, then messages.stream
// continuing in the same container with the history sent back as the SDK
// holds it. Prints one JSON report; exits 1 on any SDK error.
//
// Environment: ANTHROPIC_BASE_URL (the front proxy), ANTHROPIC_API_KEY,
// GATE_URL (the scripted model holds its streamed round after its first
// text delta until this URL is fetched: the stream's first text event
// fetches it, so the round ends only if the text came live).
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({
  baseURL: process.env.ANTHROPIC_BASE_URL,
  apiKey: process.env.ANTHROPIC_API_KEY,
  maxRetries: 0,
});
const tools = [{ type: 'code_execution_20250825', name: 'code_execution' }];
const model = 'claude-like';

try {
  const first = await client.messages.create({
    model, max_tokens: 1024, tools,
    messages: [{ role: 'user', content: 'Write and run a script.' }],
  });
  const events = [];
  const stream = client.messages.stream({
    model, max_tokens: 1024, tools, container: first.container.id,
    messages: [
      { role: 'user', content: 'Write and run a script.' },
      { role: 'assistant', content: first.content },
      { role: 'user', content: 'Run it again.' },
    ],
  });
  stream.on('streamEvent', (e) => events.push(e.type === 'content_block_start' ? `${e.type}:${e.content_block.type}` : e.type));
  const texts = [];
  stream.on('text', (delta) => {
    texts.push(delta);
    if (texts.length === 1 && process.env.GATE_URL) fetch(process.env.GATE_URL).catch((e) => process.stderr.write(`gate: ${e}\n`));
  });
  const second = await stream.finalMessage();
  // What the SDK's typed union tells apart, per block.
  const typed = (m) => m.content.map((b) => {
    switch (b.type) {
      case 'server_tool_use': return { type: b.type, id: b.id, name: b.name, input: b.input };
      case 'bash_code_execution_tool_result':
        return b.content.type === 'bash_code_execution_result'
          ? { type: b.type, tool_use_id: b.tool_use_id, stdout: b.content.stdout, stderr: b.content.stderr, return_code: b.content.return_code, files: b.content.content.map((f) => f.file_id) }
          : { type: b.type, tool_use_id: b.tool_use_id, error_code: b.content.error_code };
      case 'text_editor_code_execution_tool_result':
        return { type: b.type, tool_use_id: b.tool_use_id, content: b.content };
      case 'text': return { type: b.type, text: b.text };
      default: return { type: b.type };
    }
  });
  const summary = (m) => ({ id: m.id, stop_reason: m.stop_reason, container: m.container, usage: m.usage, blocks: typed(m) });
  process.stdout.write(JSON.stringify({ create: summary(first), stream: { events, texts, message: summary(second) } }) + '\n');
} catch (err) {
  process.stderr.write(`SDK error: ${err?.stack ?? err}\n`);
  if (err?.status) process.stderr.write(`status: ${err.status}\n`);
  if (err?.error) process.stderr.write(`error body: ${JSON.stringify(err.error)}\n`);
  process.exit(1);
}
