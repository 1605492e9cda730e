// `llamux pull`, `llamux ls`, `llamux rm`, and the model argument of `serve` that may be a
// reference instead of a path (src/hub).
import { existsSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { findModel, listModels, modelsDirectory, pull, removeModel, type PullOptions } from '../hub/pull.js';
import { parseModelReference } from '../hub/reference.js';
import { UsageError } from './args.js';
import { LS_HELP, PULL_HELP, RM_HELP } from './help.js';
import { PullProgressBar, sizeText } from './progress-bar.js';

function parse<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T) {
  try {
    return parseArgs({ args, options: { help: { type: 'boolean', short: 'h' }, ...options }, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/** Runs a pull with the progress bar on stderr (none with quiet). */
async function pullWithProgress(reference: string, options: PullOptions, quiet: boolean) {
  const bar = quiet ? undefined : new PullProgressBar(process.stderr);
  // Ctrl-C stops the transfer cleanly: the partial file stays for the next pull to resume.
  const ac = new AbortController();
  const onSignal = () => ac.abort(new Error('interrupted'));
  process.once('SIGINT', onSignal);
  try {
    return await pull(reference, { ...options, signal: ac.signal, ...(bar ? { onProgress: bar.update } : {}) });
  } finally {
    process.off('SIGINT', onSignal);
    bar?.done();
  }
}

export async function pullCommand(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, {
    'models-dir': { type: 'string' },
    endpoint: { type: 'string' },
    revision: { type: 'string' },
    mmproj: { type: 'boolean' },
    'mmproj-file': { type: 'string' },
    draft: { type: 'boolean' },
    'draft-file': { type: 'string' },
    sha256: { type: 'string' },
    force: { type: 'boolean' },
    quiet: { type: 'boolean', short: 'q' },
  });
  if (values.help) {
    console.log(PULL_HELP);
    return;
  }
  if (positionals.length !== 1) throw new UsageError('pull needs exactly one REFERENCE (org/repo:QUANT, org/repo/file.gguf or a URL)');
  if (values.mmproj && values['mmproj-file'] !== undefined) throw new UsageError('--mmproj and --mmproj-file exclude each other');
  if (values.draft && values['draft-file'] !== undefined) throw new UsageError('--draft and --draft-file exclude each other');
  const mmproj = values['mmproj-file'] ?? values.mmproj;
  const draft = values['draft-file'] ?? values.draft;
  const entry = await pullWithProgress(
    positionals[0]!,
    {
      ...(values['models-dir'] !== undefined ? { modelsDir: values['models-dir'] } : {}),
      ...(values.endpoint !== undefined ? { endpoint: values.endpoint } : {}),
      ...(values.revision !== undefined ? { revision: values.revision } : {}),
      ...(mmproj !== undefined ? { mmproj } : {}),
      ...(draft !== undefined ? { draft } : {}),
      ...(values.sha256 !== undefined ? { sha256: values.sha256 } : {}),
      ...(values.force ? { force: true } : {}),
    },
    values.quiet ?? false,
  );
  if (!values.quiet) console.error(`pulled ${entry.reference} (${entry.files.length} file${entry.files.length > 1 ? 's' : ''}, ${sizeText(entry.size)})`);
  console.log(entry.path);
}

export async function lsCommand(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, { 'models-dir': { type: 'string' }, json: { type: 'boolean' } });
  if (values.help) {
    console.log(LS_HELP);
    return;
  }
  if (positionals.length > 0) throw new UsageError('ls takes no positional arguments');
  const dirOpt = values['models-dir'] !== undefined ? { modelsDir: values['models-dir'] } : {};
  const models = await listModels(dirOpt);
  if (values.json) {
    console.log(JSON.stringify(models, null, 2));
    return;
  }
  if (models.length === 0) {
    console.log(`no models pulled (models folder ${modelsDirectory(dirOpt.modelsDir)})`);
    return;
  }
  const rows = [
    ['NAME', 'QUANT', 'SIZE', 'PATH'],
    ...models.map((m) => [
      m.quant !== null && m.reference === `${m.name}:${m.quant}` ? m.name : m.reference,
      m.quant ?? '-',
      m.files.every((f) => existsSync(f.path)) ? sizeText(m.size) : 'missing',
      m.path,
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) console.log(r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  '));
}

export async function rmCommand(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, { 'models-dir': { type: 'string' } });
  if (values.help) {
    console.log(RM_HELP);
    return;
  }
  if (positionals.length !== 1) throw new UsageError('rm needs exactly one REFERENCE (as "llamux ls" shows it, e.g. org/repo:Q4_K_M)');
  const removed = await removeModel(positionals[0]!, values['models-dir'] !== undefined ? { modelsDir: values['models-dir'] } : {});
  for (const m of removed) console.log(`removed ${m.reference} (${m.files.length} file${m.files.length > 1 ? 's' : ''}, ${sizeText(m.size)})`);
}

/**
 * `serve --model X`: a file path stays a path; otherwise a model reference names a pulled
 * model, which is pulled first when missing.
 */
export async function modelArgument(value: string, quiet: boolean): Promise<string> {
  if (existsSync(value) || /^(\.{1,2}[\\/]|[\\/~])/.test(value) || (/\.gguf$/i.test(value) && value.split('/').length < 3)) return value;
  try {
    parseModelReference(value);
  } catch {
    return value; // not a reference either: loadModel reports the missing file
  }
  const found = await findModel(value);
  if (found) return found.path;
  if (!quiet) console.error(`pulling ${value}`);
  return (await pullWithProgress(value, {}, quiet)).path;
}
