// An app that depends on llamux, as a user writes it: copied into a fresh project outside the
// repository by test/package/consumer.test.ts and run there with that project's node_modules.
// Prints one JSON line with what it saw.
// Usage: node consumer-app.mjs TINY_MODEL SCRIPTED_MODEL PROMPT
import { defineTool, loadModel, runToolCalls, systemInfo } from 'llamux';

const [tinyPath, scriptedPath, prompt] = process.argv.slice(2);
const out = {};
const info = systemInfo();
out.buildKind = info.buildKind;
out.cpuVariant = info.cpuVariant;

// A real SentencePiece model: load, tokenize round trip, generate.
const tiny = await loadModel(tinyPath);
out.roundTrip = tiny.detokenize(tiny.tokenize('Hello from an app')) === 'Hello from an app';
const tinyCtx = await tiny.createContext({ contextSize: 256, sequences: 1, threads: 1, batchThreads: 1 });
const gen = await tinyCtx.complete({ prompt: 'Once upon a time', maxTokens: 8, temperature: 0, tokens: true });
out.tinyGenerated = gen.tokens?.length ?? 0;
await tiny.dispose();

// A scripted model: one tool call end to end (span detected, arguments parsed, tool run).
const model = await loadModel(scriptedPath);
const ctx = await model.createContext({ contextSize: 512, sequences: 1, threads: 1, batchThreads: 1, toolCallMarkers: 'hermes' });
const result = await ctx.complete({ prompt, parseSpecial: true, temperature: 0, maxTokens: 64 });
out.text = result.text;
out.spans = result.toolCalls.map((c) => c.text);
const call = JSON.parse(result.toolCalls[0].text);
const weather = defineTool({
  name: 'get_weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  handler: ({ city }) => ({ city, forecast: 'sunny' }),
});
const { messages } = await runToolCalls([{ id: 'call-0', name: call.name, arguments: call.arguments }], [weather]);
out.toolResult = messages[0]?.content;
await model.dispose();
console.log(JSON.stringify(out));
