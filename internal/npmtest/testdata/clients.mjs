// One call of an official npm SDK client, for internal/npmtest:
//   node clients.mjs CHECK BASE_URL MODEL MAX_TOKENS
// sends system "You are terse." and user "Hi!" with ignore_eos, and
// prints {"text", "streamed", "input_tokens", "output_tokens"} as JSON.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const [check, base, model, max] = process.argv.slice(2);
const maxTokens = Number(max);
const apiKey = process.env.TOKENTRACE_API_KEY ?? "unused";
const system = "You are terse.";
const prompt = "Hi!";

function aiSDK() {
  const provider = createOpenAICompatible({ name: "tokentrace", baseURL: base + "/v1", apiKey, includeUsage: true });
  return {
    model: provider.chatModel(model), system, prompt, maxOutputTokens: maxTokens, maxRetries: 0,
    providerOptions: { tokentrace: { ignore_eos: true } },
  };
}

const checks = {
  async "aisdk-generate"() {
    const r = await generateText(aiSDK());
    return { text: r.text, streamed: r.text, input_tokens: r.usage.inputTokens, output_tokens: r.usage.outputTokens };
  },
  async "aisdk-stream"() {
    let failure;
    const r = streamText({ ...aiSDK(), onError: ({ error }) => { failure = error; } });
    let streamed = "";
    for await (const delta of r.textStream) streamed += delta;
    if (failure) throw failure;
    const usage = await r.usage;
    return { text: await r.text, streamed, input_tokens: usage.inputTokens, output_tokens: usage.outputTokens };
  },
  async "openai-responses-stream"() {
    const client = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0 });
    const stream = client.responses.stream({ model, instructions: system, input: prompt, max_output_tokens: maxTokens, ignore_eos: true });
    let streamed = "";
    for await (const ev of stream) if (ev.type === "response.output_text.delta") streamed += ev.delta;
    const r = await stream.finalResponse();
    return { text: r.output_text, streamed, input_tokens: r.usage?.input_tokens, output_tokens: r.usage?.output_tokens };
  },
  async "anthropic-messages-stream"() {
    const client = new Anthropic({ baseURL: base, apiKey, maxRetries: 0 });
    const stream = client.messages.stream({
      model, max_tokens: maxTokens, system, messages: [{ role: "user", content: prompt }], ignore_eos: true,
    });
    let streamed = "";
    stream.on("text", (delta) => { streamed += delta; });
    const m = await stream.finalMessage();
    const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    return { text, streamed, input_tokens: m.usage.input_tokens, output_tokens: m.usage.output_tokens };
  },
};

if (!checks[check]) {
  console.error(`unknown check ${check}; one of ${Object.keys(checks).join(", ")}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await checks[check]()));
} catch (err) {
  console.error(`${check}: ${err?.stack ?? err}`);
  process.exit(1);
}
