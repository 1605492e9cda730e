// An app written in CommonJS (Electron's main process, NestJS, a plain `node app.cjs`): it
// require()s every export path of llamux and uses each one for real. Copied into a fresh
// project outside the repository by test/package/consumer.test.ts and run there.
// Prints one JSON line with what it saw.
// Usage: node consumer-app.cjs TINY_MODEL SCRIPTED_PROMPT FIXTURE_DIR
'use strict';
const { mkdirSync } = require('node:fs');

const started = process.hrtime.bigint();
const llamux = require('llamux');
const tools = require('llamux/tools');
const server = require('llamux/server');
const testing = require('llamux/testing');
const requireMs = Number(process.hrtime.bigint() - started) / 1e6;
const pkg = require('llamux/package.json');

async function main() {
  const [tinyPath, prompt, fixtureDir] = process.argv.slice(2);
  const out = { requireMs, version: pkg.version };
  out.exportKinds = {
    loadModel: typeof llamux.loadModel,
    systemInfo: typeof llamux.systemInfo,
    defineTool: typeof tools.defineTool,
    runToolCalls: typeof tools.runToolCalls,
    createServer: typeof server.createServer,
    ensureTestModels: typeof testing.ensureTestModels,
  };
  // require() and import() share one module instance (no second copy of llamux's state).
  const imported = await import('llamux');
  out.sameInstance = imported === llamux && imported.LlamuxError === llamux.LlamuxError;
  const info = llamux.systemInfo();
  out.buildKind = info.buildKind;
  out.cpuVariant = info.cpuVariant;

  // 'llamux': a real SentencePiece model, a tokenize round trip and a generation.
  const tiny = await llamux.loadModel(tinyPath);
  out.roundTrip = tiny.detokenize(tiny.tokenize('Hello from CommonJS')) === 'Hello from CommonJS';
  const tinyCtx = await tiny.createContext({ contextSize: 256, sequences: 1, threads: 1, batchThreads: 1 });
  const gen = await tinyCtx.complete({ prompt: 'Once upon a time', maxTokens: 8, temperature: 0, emitTokenIds: true });
  out.tinyGenerated = gen.tokens ? gen.tokens.length : 0;
  await tiny.dispose();

  // 'llamux/testing': write the scripted fixture, then one tool call end to end with 'llamux/tools'.
  mkdirSync(fixtureDir, { recursive: true });
  const fixtures = await testing.ensureTestModels(fixtureDir, ['single-marker']);
  const model = await llamux.loadModel(fixtures['single-marker'].path);
  const ctx = await model.createContext({ contextSize: 512, sequences: 1, threads: 1, batchThreads: 1, toolCallMarkers: 'hermes' });
  const result = await ctx.complete({ prompt, parseSpecial: true, temperature: 0, maxTokens: 64 });
  out.spans = result.toolCalls.map((c) => c.text);
  const call = JSON.parse(result.toolCalls[0].text);
  const weather = tools.defineTool({
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    handler: ({ city }) => ({ city, forecast: 'sunny' }),
  });
  const { messages } = await tools.runToolCalls([{ id: 'call-0', name: call.name, arguments: call.arguments }], [weather]);
  out.toolResult = messages[0] && messages[0].content;
  await ctx.dispose();

  // 'llamux/server': the HTTP server on that model, one request.
  const srv = await server.createServer({ model, port: 0, ctx: 512, parallel: 1, threads: 1 });
  try {
    const res = await fetch(`${srv.url}/v1/models`);
    const body = await res.json();
    out.serverStatus = res.status;
    out.serverModels = body.data.length;
  } finally {
    await srv.close();
  }
  await model.dispose();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
