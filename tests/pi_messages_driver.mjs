// The real pi-ai 1.6 (npm @earendil-works/pi-ai) over its `pi-messages` API, driven by the Python
// tests one request per stdin line: {model, context, options: {apiKey, reasoning, sessionId,
// toolChoice, abortBefore, abortAfterChars}} → one stdout line {events, message, overflow}.
// The tests build the contexts and check what pi-ai made of serve's answers; this file only
// drives the client (`normalizeContext` then `streamSimple`, as pi's provider collection does).
import { createInterface } from "node:readline";
import { isContextOverflow, normalizeContext } from "@earendil-works/pi-ai";
import { streamSimple } from "@earendil-works/pi-ai/api/pi-messages";

async function turn(request) {
  const { model, context, options = {} } = request;
  const controller = new AbortController();
  if (options.abortBefore) controller.abort();
  const events = [];
  let streamed = 0;
  const s = streamSimple(model, normalizeContext(context), {
    apiKey: options.apiKey,
    reasoning: options.reasoning,
    sessionId: options.sessionId,
    toolChoice: options.toolChoice,
    signal: controller.signal,
  });
  for await (const event of s) {
    const seen = { type: event.type, contentIndex: event.contentIndex, delta: event.delta };
    if (event.type === "toolcall_end") seen.toolCall = event.toolCall;
    events.push(seen);
    if (options.abortAfterChars && (event.type === "text_delta" || event.type === "thinking_delta")) {
      streamed += event.delta.length;
      if (streamed >= options.abortAfterChars && !controller.signal.aborted) controller.abort();
    }
  }
  const message = await s.result();
  return { events, message, overflow: isContextOverflow(message, model.contextWindow) };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = await turn(JSON.parse(line));
  } catch (error) {
    answer = { thrown: String(error && error.stack ? error.stack : error) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
