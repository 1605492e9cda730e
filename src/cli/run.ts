// `llamux run`: one generation from the command line. The text streams to stdout; a prefill
// progress bar (long prompts on a CPU take seconds to minutes) and the final numbers go to stderr.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { renderChat } from '../chat/template.js';
import { loadModel } from '../model/load.js';
import { UsageError, intArg, progressPrinter } from './args.js';
import { RUN_HELP } from './help.js';
import { ProgressLine } from './progress-bar.js';

/** Prompts shorter than this prefill in about a second on a CPU: no bar. */
const BAR_MIN_TOKENS = 256;

function readStdin(): string {
  try {
    return readFileSync(0, 'utf8');
  } catch {
    return '';
  }
}

export async function run(args: string[]): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      options: {
        help: { type: 'boolean', short: 'h' },
        model: { type: 'string', short: 'm' },
        prompt: { type: 'string', short: 'p' },
        file: { type: 'string', short: 'f' },
        chat: { type: 'boolean' },
        'max-tokens': { type: 'string', short: 'n' },
        temp: { type: 'string' },
        seed: { type: 'string' },
        ctx: { type: 'string' },
        threads: { type: 'string' },
        'context-shift': { type: 'boolean' },
        'n-keep': { type: 'string' },
        progress: { type: 'boolean' },
        quiet: { type: 'boolean', short: 'q' },
      },
    }));
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (values.help) {
    console.log(RUN_HELP);
    return;
  }
  if (!values.model) throw new UsageError('run needs --model PATH');
  if (values.prompt !== undefined && values.file !== undefined) throw new UsageError('give --prompt or --file, not both');
  const text = values.prompt ?? (values.file !== undefined ? readFileSync(values.file, 'utf8') : process.stdin.isTTY ? '' : readStdin());
  if (text === '') throw new UsageError('run needs a prompt: --prompt TEXT, --file PATH, or text on stdin');
  const temperature = values.temp === undefined ? 0.8 : Number(values.temp);
  if (!Number.isFinite(temperature) || temperature < 0) throw new UsageError(`--temp must be a number >= 0 (got ${JSON.stringify(values.temp)})`);
  const nKeep = values['n-keep'] === undefined ? undefined : Number(values['n-keep']);
  if (nKeep !== undefined && (!Number.isInteger(nKeep) || nKeep < -1)) throw new UsageError(`--n-keep must be -1 or a count of tokens (got ${JSON.stringify(values['n-keep'])})`);
  const quiet = values.quiet ?? false;

  const loading = progressPrinter('loading', quiet);
  const model = await loadModel(values.model, { onProgress: loading.onProgress });
  loading.done();
  try {
    const ctx = await model.createContext({
      sequences: 1,
      ...(values.ctx !== undefined ? { contextSize: intArg(values.ctx, 'ctx', 1)! } : {}),
      ...(values.threads !== undefined ? { threads: intArg(values.threads, 'threads', 1)! } : {}),
    });
    try {
      const prompt = values.chat ? renderChat(model, [{ role: 'user', content: text }], { addGenerationPrompt: true }) : text;
      const tokens = await model.tokenize(prompt, { addSpecial: !values.chat, parseSpecial: values.chat ?? false });
      const showBar = !quiet && (values.progress === true || (process.stderr.isTTY === true && tokens.length >= BAR_MIN_TOKENS));
      const bar = new ProgressLine('prompt', { inPlace: values.progress === true || process.stderr.isTTY === true });
      const gen = ctx.generate({
        prompt: tokens,
        temperature,
        progress: showBar,
        ...(values['max-tokens'] !== undefined ? { maxTokens: intArg(values['max-tokens'], 'max-tokens', 1)! } : {}),
        ...(values.seed !== undefined ? { seed: intArg(values.seed, 'seed', 0)! } : {}),
        ...(values['context-shift'] ? { overflow: 'shift' as const } : {}),
        ...(nKeep !== undefined ? { nKeep } : {}),
      });
      const stop = (): void => gen.cancel();
      process.once('SIGINT', stop);
      try {
        for await (const ev of gen) {
          if (ev.type === 'progress') {
            bar.update(ev.processed, ev.total, 'tokens');
            if (ev.processed === ev.total) bar.done();
          } else if (ev.type === 'text') {
            process.stdout.write(ev.text);
          } else if (ev.type === 'final') {
            process.stdout.write('\n');
            if (!quiet) {
              const shifted = ev.shiftedTokens > 0 ? `, ${ev.shiftedTokens} dropped by context shifts` : '';
              process.stderr.write(
                `${ev.promptTokens} prompt tokens (${ev.reusedTokens} cached), ${ev.generatedTokens} generated${shifted}; ` +
                  `prefill ${ev.timings.prefillTokensPerSec.toFixed(1)} tok/s, decode ${ev.timings.decodeTokensPerSec.toFixed(1)} tok/s (${ev.finishReason})\n`,
              );
            }
          }
        }
      } finally {
        process.off('SIGINT', stop);
      }
    } finally {
      await ctx.dispose();
    }
  } finally {
    await model.dispose();
  }
}
