// The only bridge between the page and the main process.
const { contextBridge, ipcRenderer } = require('electron');

contextBridge.exposeInMainWorld('llamux', {
  ask: (prompt) => ipcRenderer.send('llamux:ask', prompt),
  stop: () => ipcRenderer.send('llamux:stop'),
  onEvent: (fn) => ipcRenderer.on('llamux', (_e, msg) => fn(msg)),
});
