// The page: talks to main only through window.llamux (preload.cjs).
const status = document.getElementById('status');
const out = document.getElementById('out');
document.getElementById('go').onclick = () => { out.textContent = ''; window.llamux.ask(document.getElementById('prompt').value); };
document.getElementById('stop').onclick = () => window.llamux.stop();
window.llamux.onEvent((m) => {
  if (m.type === 'info') status.textContent = m.exists ? `loading ${m.modelPath}` : `put a GGUF model at ${m.modelPath} and restart`;
  else if (m.type === 'progress') status.textContent = `loading ${Math.round(m.value * 100)} %`;
  else if (m.type === 'ready') status.textContent = m.fit ? `ready: ${m.fit.mode}, ${m.fit.gpuLayers}/${m.fit.totalLayers} layers on the GPU, context ${m.fit.contextSize}` : 'ready';
  else if (m.type === 'text') out.textContent += m.text;
  else if (m.type === 'error' || m.type === 'log') status.textContent = `${m.type}: ${m.message}`;
  else if (m.type === 'exit') status.textContent = `worker exited (${m.code})`;
});
