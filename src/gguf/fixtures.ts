/** The ready-made scripted test models and `ensureTestModels`. */
import { mkdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { CHATML_TOOLS_TEMPLATE } from './chat-template.js';
import { Prng } from './prng.js';
import { buildScriptedModel, writeBytesAtomic } from './scripted.js';
import type { BuiltScriptedModel, ScriptedModelDescription, ScriptedModelSpec, ScriptStep } from './scripted.js';
import { sp, SPACE } from './vocab.js';
import { encodeGguf } from './writer.js';

/** Names of the ready-made fixtures. */
export type TestModelName =
  | 'single-marker'
  | 'multi-marker'
  | 'payload-marker'
  | 'near-tie'
  | 'two-turn'
  | 'long-script'
  | 'demo'
  | 'two-calls'
  | 'grammar-call'
  | 'grammar-text'
  | 'grammar-list';

export const TEST_MODEL_NAMES: readonly TestModelName[] = [
  'single-marker',
  'multi-marker',
  'payload-marker',
  'near-tie',
  'two-turn',
  'long-script',
  'demo',
  'two-calls',
  'grammar-call',
  'grammar-text',
  'grammar-list',
];

/** A fixture on disk: its path and what tests may assert. */
export interface TestModel {
  readonly path: string;
  readonly spec: ScriptedModelSpec;
  readonly description: ScriptedModelDescription;
}

const TOOL_CALL_PAYLOAD: readonly ScriptStep[] = [
  '{"name":',
  `${SPACE}"get_weather",`,
  `${SPACE}"arguments":`,
  `${SPACE}{"city":`,
];

/** `single-marker`: single-token `<tool_call>`/`</tool_call>` (USER_DEFINED), near ties on both wrappers and in the payload. */
const singleMarker: ScriptedModelSpec = {
  name: 'single-marker',
  special: [
    { text: '<tool_call>', type: 'USER_DEFINED' },
    { text: '</tool_call>', type: 'USER_DEFINED' },
  ],
  markers: { toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>' },
  scripts: [
    {
      name: 'main',
      prompt: sp('Weather| in| Paris| please:'),
      continuation: [
        ...sp(' Let| me| check| that.'),
        { token: '<tool_call>', alt: sp(' Calling:') },
        ...TOOL_CALL_PAYLOAD,
        { token: `${SPACE}"Paris"`, alt: [`${SPACE}"Lyon"`] },
        '}}',
        { token: '</tool_call>', alt: sp(' Done.') },
      ],
    },
  ],
};

/**
 * `multi-marker`: `<tool_call>` is four word tokens `<` `tool` `_call` `>`; the script first
 * writes the false start `<` `tool` `box`. `box` is a flag token: `tool` is followed by `box`
 * until `box` has appeared, then by `_call`. The end marker `</tool_call>` is one USER_DEFINED token.
 */
const multiMarker: ScriptedModelSpec = {
  name: 'multi-marker',
  special: [{ text: '</tool_call>', type: 'USER_DEFINED' }],
  markers: { toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>', falseStart: '<toolbox' },
  scripts: [
    {
      name: 'main',
      prompt: sp('Find| the| weather:'),
      continuation: [
        ...sp(' First| check| the| kit:'),
        '<',
        'tool',
        'box',
        ...sp(' found.| Now| calling:'),
        '<',
        'tool',
        '_call',
        '>',
        ...TOOL_CALL_PAYLOAD,
        `${SPACE}"Paris"`,
        '}}',
        '</tool_call>',
      ],
    },
  ],
  flags: [{ flag: 'box', trigger: 'tool', without: 'box', with: '_call' }],
};

/** `payload-marker`: `<tool_call>` name `<arg>` JSON `</arg>` `</tool_call>`, near ties on both wrappers and inside the argument. */
const payloadMarker: ScriptedModelSpec = {
  name: 'payload-marker',
  special: [
    { text: '<tool_call>', type: 'USER_DEFINED' },
    { text: '</tool_call>', type: 'USER_DEFINED' },
    { text: '<arg>', type: 'USER_DEFINED' },
    { text: '</arg>', type: 'USER_DEFINED' },
  ],
  markers: { toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>', argStart: '<arg>', argEnd: '</arg>' },
  scripts: [
    {
      name: 'main',
      prompt: sp('Book| a| table:'),
      continuation: [
        ...sp(' Booking| now.'),
        { token: '<tool_call>', alt: sp(' Booking:') },
        'book_table',
        '<arg>',
        '{"party":',
        { token: `${SPACE}4}`, alt: [`${SPACE}5}`] },
        '</arg>',
        { token: '</tool_call>', alt: sp(' Thanks.') },
      ],
    },
  ],
};

/** `near-tie`: plain text with one near tie (`▁cat` 55 % / `▁dog` 45 %). */
const nearTie: ScriptedModelSpec = {
  name: 'near-tie',
  scripts: [
    {
      name: 'main',
      prompt: sp('Once| upon| a| time'),
      continuation: [...sp(' there| lived| a'), { token: `${SPACE}cat`, alt: [`${SPACE}dog`] }, ...sp(' named| Tom.')],
    },
  ],
};

const CHAT_SPECIAL = [
  { text: '<|im_start|>', type: 'CONTROL' },
  { text: '<|im_end|>', type: 'CONTROL' },
  { text: '<tool_call>', type: 'USER_DEFINED' },
  { text: '</tool_call>', type: 'USER_DEFINED' },
  { text: '<tool_response>', type: 'USER_DEFINED' },
  { text: '</tool_response>', type: 'USER_DEFINED' },
] as const;

const TURN1_PROMPT = '<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n';
const TURN1_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>';
const TOOL_RESULT = '{"temperature": 18, "condition": "sunny"}';
const TURN2_PROMPT = `${TURN1_PROMPT}${TURN1_CALL}<|im_end|>\n<|im_start|>user\n<tool_response>${TOOL_RESULT}</tool_response><|im_end|>\n<|im_start|>assistant\n`;

/**
 * `two-turn`: ChatML prompts. Turn 1 (no tool result yet) → a `get_weather` tool call; turn 2
 * (a `<tool_response>` anywhere in the prompt: the flag) → a text answer. Ends with `<|im_end|>`.
 */
function twoTurn(name: 'two-turn' | 'demo'): ScriptedModelSpec {
  return {
    name,
    special: CHAT_SPECIAL,
    eos: '<|im_end|>',
    markers: {
      toolCallStart: '<tool_call>',
      toolCallEnd: '</tool_call>',
      toolResponseStart: '<tool_response>',
      toolResponseEnd: '</tool_response>',
      imStart: '<|im_start|>',
      imEnd: '<|im_end|>',
    },
    scripts: [
      {
        name: 'turn1',
        prompt: { text: TURN1_PROMPT },
        continuation: ['<tool_call>', ...TOOL_CALL_PAYLOAD, `${SPACE}"Paris"`, '}}', '</tool_call>'],
      },
      {
        name: 'turn2',
        prompt: { text: TURN2_PROMPT },
        continuation: sp('The| weather| in| Paris| is| sunny| and| 18°C.'),
      },
    ],
    flags: [{ flag: '<tool_response>', trigger: '<0x0A>', without: '<tool_call>', with: 'The' }],
    // Words of the prompts, so they tokenize as words rather than bytes.
    extraWords: ['user', 'assistant', 'system', 'What', ...sp(' is| the| weather| in| Paris?')],
    ...(name === 'demo' ? { chatTemplate: CHATML_TOOLS_TEMPLATE } : {}),
  };
}

const CONSONANTS = 'bdfgklmnprstvz';
const VOWELS = 'aeiou';

/** `long-script`: 300 whole-word tokens, canonical under re-tokenization, with landmark phrases for stop strings. */
function longScript(): ScriptedModelSpec {
  const opening = sp(' The| quick| brown| fox| jumps| over| lazy| dogs.');
  const middle = sp(' Hello| world!| Stop| here| please.');
  const ending = sp(' This| is| the| end.');
  const used = new Set<string>([...opening, ...middle, ...ending, ...sp('Tell| me| a| long| story:')]);
  const rng = new Prng(0x10c5);
  const generated: string[] = [];
  const target = 300 - opening.length - middle.length - ending.length;
  while (generated.length < target) {
    const syllables = 2 + (rng.nextU32() % 2);
    let w = SPACE;
    for (let i = 0; i < syllables; i++) {
      w += CONSONANTS[rng.nextU32() % CONSONANTS.length]! + VOWELS[rng.nextU32() % VOWELS.length]!;
    }
    if (used.has(w)) continue;
    used.add(w);
    generated.push(w);
  }
  const half = generated.length >> 1;
  return {
    name: 'long-script',
    scripts: [
      {
        name: 'main',
        prompt: sp('Tell| me| a| long| story:'),
        continuation: [...opening, ...generated.slice(0, half), ...middle, ...generated.slice(half), ...ending],
      },
    ],
  };
}

/**
 * `two-calls`: text, two `<tool_call>` spans in one turn separated by a newline, then text.
 * `<tool_call>` opens `get_weather` until `▁"Paris"` has appeared, then `get_time`;
 * `</tool_call>` is followed by a newline until `▁"CET"}}` has appeared, then by the closing text.
 */
const twoCalls: ScriptedModelSpec = {
  name: 'two-calls',
  special: [
    { text: '<tool_call>', type: 'USER_DEFINED' },
    { text: '</tool_call>', type: 'USER_DEFINED' },
  ],
  markers: { toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>' },
  scripts: [
    {
      name: 'main',
      prompt: sp('Weather| and| time| in| Paris:'),
      continuation: [
        ...sp(' Checking| both.'),
        '<tool_call>',
        ...TOOL_CALL_PAYLOAD,
        `${SPACE}"Paris"`,
        '}}',
        '</tool_call>',
        '<0x0A>',
        '<tool_call>',
        '{"tool":',
        `${SPACE}"get_time",`,
        `${SPACE}"args":`,
        `${SPACE}{"tz":`,
        `${SPACE}"CET"}}`,
        '</tool_call>',
        ...sp(' Both| requested.'),
      ],
    },
  ],
  flags: [
    { flag: `${SPACE}"Paris"`, trigger: '<tool_call>', without: '{"name":', with: '{"tool":' },
    { flag: `${SPACE}"CET"}}`, trigger: '</tool_call>', without: '<0x0A>', with: `${SPACE}Both` },
  ],
};

const TOOL_MARKER_SPECIAL = [
  { text: '<tool_call>', type: 'USER_DEFINED' },
  { text: '</tool_call>', type: 'USER_DEFINED' },
] as const;

/**
 * `grammar-call`: a Hermes call whose greedy form is wrong three ways, each a near tie whose
 * runner-up is right, so a tool grammar's choice is known exactly:
 * greedy `{"name": "get_wether", "arguments": {"city": Rome, "days": "3"}}` (an unknown tool,
 * invalid JSON, a string where an integer belongs); runner-ups `get_weather`, `▁"Rome",`, `▁3}}`.
 */
const grammarCall: ScriptedModelSpec = {
  name: 'grammar-call',
  special: TOOL_MARKER_SPECIAL,
  markers: { toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>' },
  scripts: [
    {
      name: 'main',
      prompt: sp('Weather| in| Rome| for| three| days?'),
      continuation: [
        '<tool_call>',
        `{"name":${SPACE}"`,
        { token: 'get_wether', alt: ['get_weather'] },
        `",${SPACE}"arguments":${SPACE}{"city":`,
        { token: `${SPACE}Rome,`, alt: [`${SPACE}"Rome",`] },
        `${SPACE}"days":`,
        { token: `${SPACE}"3"}}`, alt: [`${SPACE}3}}`] },
        '</tool_call>',
      ],
    },
  ],
};

/**
 * `grammar-text`: answers in text (`▁It▁is▁42.`); the runner-up of that first token is a whole
 * `multiply` call, so `toolChoice: 'required'` has a known result.
 */
const grammarText: ScriptedModelSpec = {
  name: 'grammar-text',
  special: TOOL_MARKER_SPECIAL,
  markers: { toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>' },
  scripts: [
    {
      name: 'main',
      prompt: sp('What| is| six| times| seven?'),
      continuation: [
        {
          token: `${SPACE}It${SPACE}is${SPACE}42.`,
          alt: ['<tool_call>', `{"name":${SPACE}"multiply",`, `${SPACE}"arguments":${SPACE}{"a":${SPACE}6,`, `${SPACE}"b":${SPACE}7}}`, '</tool_call>'],
        },
      ],
    },
  ],
};

/**
 * `grammar-list`: Mistral-style `[TOOL_CALLS][…]</s>`, the end marker being EOS. Greedy writes
 * two calls in the list (a near tie: the second call 55 %, `]` 45 %).
 */
const grammarList: ScriptedModelSpec = {
  name: 'grammar-list',
  special: [{ text: '[TOOL_CALLS]', type: 'CONTROL' }],
  markers: { toolCallStart: '[TOOL_CALLS]', toolCallEnd: '</s>' },
  scripts: [
    {
      name: 'main',
      prompt: sp('Weather| and| time| in| Rome?'),
      continuation: [
        '[TOOL_CALLS]',
        `[{"name":${SPACE}"get_weather",${SPACE}"arguments":${SPACE}{"city":${SPACE}"Rome"}}`,
        { token: `,${SPACE}{"name":${SPACE}"get_time",${SPACE}"arguments":${SPACE}{"tz":${SPACE}"CET"}}]`, alt: [']'] },
      ],
    },
  ],
};

/** The spec of a ready-made fixture. */
export function testModelSpec(name: TestModelName): ScriptedModelSpec {
  switch (name) {
    case 'single-marker':
      return singleMarker;
    case 'multi-marker':
      return multiMarker;
    case 'payload-marker':
      return payloadMarker;
    case 'near-tie':
      return nearTie;
    case 'two-turn':
      return twoTurn('two-turn');
    case 'demo':
      return twoTurn('demo');
    case 'long-script':
      return longScript();
    case 'two-calls':
      return twoCalls;
    case 'grammar-call':
      return grammarCall;
    case 'grammar-text':
      return grammarText;
    case 'grammar-list':
      return grammarList;
    default:
      throw new RangeError(`Unknown test model "${String(name)}"`);
  }
}

/** Builds a fixture in memory (no file). */
export function buildTestModel(name: TestModelName): BuiltScriptedModel {
  return buildScriptedModel(testModelSpec(name));
}

async function sameContent(path: string, bytes: Uint8Array): Promise<boolean> {
  try {
    const s = await stat(path);
    if (s.size !== bytes.length) return false;
    const existing = await readFile(path);
    return Buffer.compare(existing, bytes) === 0;
  } catch {
    return false;
  }
}

/**
 * Writes the ready-made scripted models into `dir` (created if needed) unless an identical file
 * is already there, and returns each one's path, spec and description. Deterministic: repeated
 * runs give byte-identical files; concurrent callers are safe (atomic renames). A
 * `<name>.json` description is written beside each model.
 *
 * @example
 * const models = await ensureTestModels('.cache/test-models');
 * const { path, description } = models['two-turn'];
 * description.scripts.turn2.greedyText; // 'The weather in Paris is sunny and 18°C.'
 */
export async function ensureTestModels(
  dir: string,
  names: readonly TestModelName[] = TEST_MODEL_NAMES,
): Promise<Record<TestModelName, TestModel>> {
  await mkdir(dir, { recursive: true });
  const out = {} as Record<TestModelName, TestModel>;
  for (const name of names) {
    const spec = testModelSpec(name);
    const built = buildScriptedModel(spec);
    const path = join(dir, `${name}.gguf`);
    const bytes = encodeGguf(built.gguf);
    if (!(await sameContent(path, bytes))) await writeBytesAtomic(path, bytes);
    const description = { ...built.description, path };
    const json = `${JSON.stringify(description, null, 2)}\n`;
    const jsonPath = join(dir, `${name}.json`);
    if (!(await sameContent(jsonPath, Buffer.from(json)))) await writeBytesAtomic(jsonPath, Buffer.from(json));
    out[name] = { path, spec, description };
  }
  return out;
}
