import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { LlamuxServer } from '../../src/server/index.js';

export function openaiFor(server: LlamuxServer, apiKey = 'none'): OpenAI {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
}

export function anthropicFor(server: LlamuxServer, apiKey = 'none'): Anthropic {
  return new Anthropic({ baseURL: server.url, apiKey, maxRetries: 0, timeout: 30_000 });
}
