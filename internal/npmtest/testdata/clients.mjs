// One call of an official npm SDK client, for internal/npmtest:
//   node clients.mjs CHECK BASE_URL MODEL MAX_TOKENS
// sends system "You are terse." and user "Hi!" with ignore_eos, and
// prints {"text", "streamed", "reasoning", "streamed_reasoning",
// "input_tokens", "output_tokens"} as JSON: the final texts as the SDK
// assembles them, the texts of its deltas, and the usage it reports.
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
    return {
      text: r.text, streamed: r.text, reasoning: r.reasoningText ?? "", streamed_reasoning: r.reasoningText ?? "",
      input_tokens: r.usage.inputTokens, output_tokens: r.usage.outputTokens,
    };
  },
  async "aisdk-stream"() {
    let failure;
    const r = streamText({ ...aiSDK(), onError: ({ error }) => { failure = error; } });
    let streamed = "", streamedReasoning = "";
    for await (const part of r.fullStream) {
      if (part.type === "text-delta") streamed += part.text;
      else if (part.type === "reasoning-delta") streamedReasoning += part.text;
    }
    if (failure) throw failure;
    const usage = await r.usage;
    return {
      text: await r.text, streamed, reasoning: (await r.reasoningText) ?? "", streamed_reasoning: streamedReasoning,
      input_tokens: usage.inputTokens, output_tokens: usage.outputTokens,
    };
  },
  async "openai-responses-stream"() {
    const client = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0 });
    const stream = client.responses.stream({ model, instructions: system, input: prompt, max_output_tokens: maxTokens, ignore_eos: true });
    let streamed = "", streamedReasoning = "";
    for await (const ev of stream) {
      if (ev.type === "response.output_text.delta") streamed += ev.delta;
      else if (ev.type === "response.reasoning_text.delta") streamedReasoning += ev.delta;
    }
    const r = await stream.finalResponse();
    const reasoning = r.output.filter((o) => o.type === "reasoning").flatMap((o) => o.content ?? []).map((c) => c.text).join("");
    return {
      text: r.output_text, streamed, reasoning, streamed_reasoning: streamedReasoning,
      input_tokens: r.usage?.input_tokens, output_tokens: r.usage?.output_tokens,
    };
  },
  async "anthropic-messages-stream"() {
    const client = new Anthropic({ baseURL: base, apiKey, maxRetries: 0 });
    const stream = client.messages.stream({
      model, max_tokens: maxTokens, system, messages: [{ role: "user", content: prompt }], ignore_eos: true,
    });
    let streamed = "", streamedReasoning = "";
    stream.on("text", (delta) => { streamed += delta; });
    stream.on("thinking", (delta) => { streamedReasoning += delta; });
    const m = await stream.finalMessage();
    const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    const reasoning = m.content.filter((b) => b.type === "thinking").map((b) => b.thinking).join("");
    return {
      text, streamed, reasoning, streamed_reasoning: streamedReasoning,
      input_tokens: m.usage.input_tokens, output_tokens: m.usage.output_tokens,
    };
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
