/**
 * A ChatML chat template with tool calls in the style of Qwen 2.5, small enough to read.
 *
 * - Tools go into a system turn as JSON lines inside `<tools></tools>`.
 * - An assistant tool call renders as `<tool_call>{"name": …, "arguments": …}</tool_call>` (no
 *   newlines); `arguments` may be an object or an already-serialised JSON string.
 * - A `tool` message renders as a user turn `<tool_response>…</tool_response>`.
 * - `add_generation_prompt` appends `<|im_start|>assistant\n`.
 */
export const CHATML_TOOLS_TEMPLATE = [
  "{%- if tools %}",
  "{{- '<|im_start|>system\\n' }}",
  "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}",
  "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}",
  "{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}",
  "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}",
  "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n' }}",
  "{{- '<tool_call>{\"name\": <function-name>, \"arguments\": <args-json-object>}</tool_call><|im_end|>\\n' }}",
  "{%- elif messages[0].role == 'system' %}",
  "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- for message in messages %}",
  "{%- if message.role == 'user' %}",
  "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}",
  "{%- elif message.role == 'assistant' %}",
  "{{- '<|im_start|>assistant\\n' }}",
  "{%- if message.content %}{{- message.content }}{%- endif %}",
  "{%- if message.tool_calls %}",
  "{%- for tool_call in message.tool_calls %}",
  "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}",
  "{{- '<tool_call>{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}",
  "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}",
  "{{- '}</tool_call>' }}",
  "{%- endfor %}",
  "{%- endif %}",
  "{{- '<|im_end|>\\n' }}",
  "{%- elif message.role == 'tool' %}",
  "{{- '<|im_start|>user\\n<tool_response>' + message.content + '</tool_response><|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- endfor %}",
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
].join('\n');
