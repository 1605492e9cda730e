// Six tools with realistic argument schemas (the grammar compile benchmark and the markers suite).
import type { GenerateTool } from '../../src/index.js';

export const SIX_TOOLS: GenerateTool[] = [
  {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', minLength: 1 }, unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1, maximum: 14 } },
      required: ['city'],
    },
  },
  {
    name: 'search_web',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string', minLength: 1, maxLength: 200 },
        max_results: { type: 'integer' },
        site: { type: 'string' },
        freshness: { enum: ['day', 'week', 'month', 'any'] },
      },
      required: ['query'],
    },
  },
  {
    name: 'send_email',
    parameters: {
      type: 'object',
      properties: {
        to: { type: 'array', items: { type: 'string', format: 'email' }, minItems: 1, maxItems: 10 },
        cc: { type: 'array', items: { type: 'string', format: 'email' } },
        subject: { type: 'string', maxLength: 120 },
        body: { type: 'string' },
        priority: { enum: ['low', 'normal', 'high'] },
      },
      required: ['to', 'subject', 'body'],
    },
  },
  {
    name: 'create_event',
    parameters: {
      type: 'object',
      properties: {
        title: { type: 'string' },
        start: { type: 'string', format: 'date-time' },
        end: { type: 'string', format: 'date-time' },
        attendees: {
          type: 'array',
          items: { type: 'object', properties: { name: { type: 'string' }, email: { type: 'string' }, optional: { type: 'boolean' } }, required: ['email'] },
        },
        location: { type: ['string', 'null'] },
        reminders: { type: 'array', items: { type: 'integer' }, maxItems: 5 },
      },
      required: ['title', 'start'],
    },
  },
  {
    name: 'read_file',
    parameters: {
      type: 'object',
      properties: { path: { type: 'string' }, encoding: { enum: ['utf8', 'base64'] }, offset: { type: 'integer' }, limit: { type: 'integer' } },
      required: ['path'],
      additionalProperties: false,
    },
  },
  {
    name: 'run_sql',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string' },
        params: { type: 'array', items: { anyOf: [{ type: 'string' }, { type: 'number' }, { type: 'boolean' }, { type: 'null' }] } },
        timeout_ms: { type: 'integer' },
        options: { type: 'object', properties: { read_only: { type: 'boolean' }, explain: { type: 'boolean' } } },
      },
      required: ['query'],
    },
  },
];
