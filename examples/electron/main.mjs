// Main process: a window, and a utility process (worker.mjs) that owns the model. The model is
// never loaded in the main process: a long decode there would freeze every window, and a crash
// in native code would take the whole app down instead of one worker.
import { app, BrowserWindow, ipcMain, utilityProcess } from 'electron';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// The model lives in the user's data folder (~/.config/<app>, ~/Library/Application Support/<app>,
// %APPDATA%\<app>), downloaded or copied there on first run: never inside the (read-only) asar.
const modelsDir = join(app.getPath('userData'), 'models');
const modelPath = process.env.LLAMUX_MODEL ?? join(modelsDir, 'model.gguf');

let worker;
let window;

function startWorker() {
  // utilityProcess: a Node.js child with Electron's ABI; native addons load there as in Node.
  worker = utilityProcess.fork(join(here, 'worker.mjs'), [], { serviceName: 'llamux', stdio: 'inherit' });
  worker.on('message', (msg) => window?.webContents.send('llamux', msg));
  worker.on('exit', (code) => {
    window?.webContents.send('llamux', { type: 'exit', code });
    worker = undefined;
  });
  worker.postMessage({ type: 'load', modelPath });
}

// LLAMUX_SMOKE=1 (the CI packaging test): no window; load, generate a few tokens, exit 0.
const smoke = process.env.LLAMUX_SMOKE === '1';

app.whenReady().then(() => {
  mkdirSync(modelsDir, { recursive: true });
  if (smoke) {
    startWorker();
    let text = '';
    worker.on('message', (msg) => {
      if (msg.type === 'ready') worker.postMessage({ type: 'generate', prompt: 'Hello', maxTokens: 8 });
      else if (msg.type === 'text') text += msg.text;
      else if (msg.type === 'done') {
        console.log(`smoke ok: ${JSON.stringify(text)}`);
        app.exit(0);
      } else if (msg.type === 'error') {
        console.error(`smoke failed: ${msg.message}`);
        app.exit(1);
      }
    });
    return;
  }
  window = new BrowserWindow({
    width: 720,
    height: 560,
    webPreferences: { preload: join(here, 'preload.cjs'), contextIsolation: true, sandbox: true },
  });
  window.loadFile(join(here, 'index.html'));
  window.webContents.once('did-finish-load', () => {
    window.webContents.send('llamux', { type: 'info', modelPath, exists: existsSync(modelPath) });
    if (existsSync(modelPath)) startWorker();
  });
  ipcMain.on('llamux:ask', (_e, prompt) => worker?.postMessage({ type: 'generate', prompt: String(prompt) }));
  ipcMain.on('llamux:stop', () => worker?.postMessage({ type: 'stop' }));
});

// Clean shutdown: the worker disposes its context and model before the app quits.
app.on('before-quit', (e) => {
  if (!worker) return;
  e.preventDefault();
  const w = worker;
  const timer = setTimeout(() => w.kill(), 5000);
  w.once('exit', () => {
    clearTimeout(timer);
    worker = undefined;
    app.quit();
  });
  w.postMessage({ type: 'quit' });
});
app.on('window-all-closed', () => app.quit());
