// serve --prompt-cache-ttl SHORT[,LONG]: seconds a cache_control breakpoint's prefix is kept,
// per ttl ("5m", then "1h"), as the server's promptCacheTtlMs.
import { describe, expect, it } from 'vitest';
import { parsePromptCacheTtl } from '../../src/cli/args.js';

describe('parsePromptCacheTtl()', () => {
  it('reads SECONDS and SECONDS,SECONDS into milliseconds per ttl', () => {
    expect(parsePromptCacheTtl('600')).toEqual({ '5m': 600_000 });
    expect(parsePromptCacheTtl('60, 7200')).toEqual({ '5m': 60_000, '1h': 7_200_000 });
  });

  it('refuses anything else with a usage message', () => {
    for (const bad of ['', '0', '5m', '1,2,3', '-1', '1.5', '3000000', '300,']) {
      expect(() => parsePromptCacheTtl(bad), bad).toThrow(/--prompt-cache-ttl expects SECONDS or SECONDS,SECONDS/);
    }
  });
});
