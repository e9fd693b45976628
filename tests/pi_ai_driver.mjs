// The real pi-ai (npm @mariozechner/pi-ai) driven by the Python tests, one request per stdin line:
// {model, context, options: {apiKey, reasoning, abortBefore, abortAfterChars}} → one stdout line
// {events: [{type, contentIndex, delta}], message, overflow}. The tests build the contexts and
// check what pi-ai made of serve's answers; this file only drives the client.
import { createInterface } from "node:readline";
import { isContextOverflow, streamSimple } from "@mariozechner/pi-ai";

async function turn(request) {
  const { model, context, options = {} } = request;
  const controller = new AbortController();
  if (options.abortBefore) controller.abort();
  const events = [];
  let streamed = 0;
  const s = streamSimple(model, context, {
    apiKey: options.apiKey,
    reasoning: options.reasoning,
    signal: controller.signal,
    maxRetryDelayMs: 0,
  });
  for await (const event of s) {
    events.push({ type: event.type, contentIndex: event.contentIndex, delta: event.delta });
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
