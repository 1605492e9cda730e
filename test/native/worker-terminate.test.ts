// A worker terminated while a native call runs in it (a tokenize of hostile text takes
// seconds) must not take the process down: the call's result can no longer be handed to JS.
// Found through the server's tokenizer workers (issue 15): node-addon-api aborted the process
// with "terminate called after throwing an instance of 'Napi::Error'".
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

describe('Worker#terminate() during a native call', () => {
  it('ends the worker and leaves the process running', () => {
    const workerFile = join(tempDir('terminate'), 'worker.mjs');
    writeFileSync(workerFile, `
      import { parentPort } from 'node:worker_threads';
      import { register } from 'tsx/esm/api';
      register();
      const { loadModel } = await import(${JSON.stringify(join(projectRoot, 'src', 'index.ts'))});
      const m = await loadModel(${JSON.stringify(tinyModelPath)}, { vocabOnly: true });
      parentPort.postMessage('loaded');
      m.tokenize('\\u{1F600}'.repeat(60000)); // super-linear in llama.cpp: seconds
      parentPort.postMessage('tokenized');
    `);
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', `
      import { Worker } from 'node:worker_threads';
      const w = new Worker(${JSON.stringify(workerFile)}, { execArgv: [] });
      w.on('message', (m) => { if (m === 'loaded') setTimeout(() => w.terminate(), 200); });
      w.on('exit', () => setTimeout(() => console.log('alive after terminate'), 100));
    `], { cwd: projectRoot, encoding: 'utf8', timeout: 120_000 });
    expect(out).toContain('alive after terminate');
  }, 150_000);
});
