// The help texts of the `llamux` command (src/cli.ts).
import { MARKER_PRESETS } from '../engine/markers.js';

export const MAIN_HELP = `Usage: llamux <command> [options]

Commands:
  serve       Start an OpenAI- and Anthropic-compatible server
  rpc-server  Serve this machine's devices to other llamux processes (ggml RPC)
  demo        Run a two-turn tool-calling agent loop on a scripted model
  inspect     Show a model's metadata and its tool-call markers
  doctor      Show devices, free memory, the CPU variant and the GPU plan for a model
  bench       Run the benchmarks (from a checkout of the repository)

Options:
  -h, --help      Show help (also: llamux <command> --help)
  -v, --version   Show the version

Run "llamux <command> --help" for a command's options.`;

export const SERVE_HELP = `Usage: llamux serve --model PATH [options]

Starts a server with POST /v1/chat/completions (OpenAI), POST /v1/messages (Anthropic),
GET /v1/models, GET /health and GET /metrics.

Options:
  -m, --model PATH          GGUF model file (required)
      --rpc HOST:PORT,...   Place the model's layers on these "llamux rpc-server" processes
      --mmproj PATH         A multimodal projector (mmproj GGUF): user messages may hold images
                            (OpenAI image_url data: URLs, Anthropic base64 image blocks)
      --host HOST           Address to listen on (default 127.0.0.1)
      --port N              Port (default 8080; 0 picks a free one)
      --ctx N               Context size in tokens, shared by all sequences (default 8192)
      --parallel N          Sequences decoded in parallel (default 4)
      --threads N           CPU threads for decoding (default: all)
      --markers M           Tool-call markers: auto (default), none, a preset
                            (${Object.keys(MARKER_PRESETS).join(', ')}) or START,END
      --api-key KEY         Require this key (Bearer or x-api-key); repeatable; default $LLAMUX_API_KEY
      --allowed-host NAME   Also accept this Host header (repeatable; loopback names always;
                            "*" turns the DNS-rebinding check off)
      --isolate-tenants     Tenants (one per API key, or the x-llamux-tenant header with one
                            key) never share conversations, tool-call replay or cache numbers
      --cache-ram MB        RAM tier of saved sequence states (default 256; 0: off)
      --cache-dir DIR       Disk tier of saved sequence states (off by default)
      --deterministic       Logits independent of batching, cache tiers and concurrency (same
                            model, CPU variant and thread count; slower prefill): docs/determinism.md
      --spec MODE           Speculative decoding: ngram (drafts looked up in the prompt and
                            output), draft (greedy drafts of --draft-model), mtp (the model's
                            own multi-token-prediction block: GLM-4.5+, DeepSeek-V3, ...)
                            or off (default);
                            verified in the decode batch, same output; a request opts out
                            with "speculative": false
      --draft-model PATH    With --spec draft: a small model with the same vocabulary
      --spec-draft-max N    With --spec ngram or mtp: draft tokens per verification (default 12)
      --store PATH          SQLite file of the tool-call store (default: in memory)
      --chat-template FILE  Jinja chat template replacing the model's own
      --max-body BYTES      Largest accepted request body (default 4194304)
      --max-prompt-bytes N  Largest message and tool text per request (default 1048576)
      --overflow POLICY     A prompt longer than a sequence: error (400, the default) or
                            truncate-middle (drop its middle, report usage.truncated_tokens)
      --tokenize-timeout MS Stop rendering and tokenizing one request after this (default 10000)
      --tokenize-workers N  Threads that render and tokenize prompts (default 2)
      --max-queued N        Requests waiting for a sequence before 503 (default 1024)
      --max-connections N   Open connections at most (default 512)
      --headers-timeout MS  Time to receive a request's headers (default 10000)
      --request-timeout MS  Time to receive a whole request (default 60000)
      --keep-alive-timeout MS  Idle keep-alive connections close after this (default 5000)
      --send-timeout MS     Disconnect a streaming client that reads nothing this long (default 60000)
      --session-ttl MS      Idle conversations release their sequence after this (default 600000)
  -q, --quiet               No progress display
  -h, --help                Show this help`;

export const RPC_SERVER_HELP = `Usage: llamux rpc-server [options]

Serves this machine's devices (its GPUs, else its CPU) over ggml's RPC protocol, so that
"llamux serve --rpc HOST:PORT" or loadModel(path, { rpcServers }) on another machine places
model layers here. Runs until SIGINT or SIGTERM; serves one client process at a time.

The RPC protocol has NO authentication and no encryption: anyone who can connect can run
computations on this machine and read what it holds. Use it on a private network or through
an SSH or WireGuard tunnel only.

Options:
      --host ADDR        IPv4 address to listen on (default 127.0.0.1)
      --port N           Port (default 50052)
      --threads N        CPU threads for the computations (default: all)
      --cache-dir DIR    Cache large tensors here, so a client reloading the same model sends
                         their hashes instead of their bytes
      --allow-remote     Required to listen on an address other than loopback
      --mem MB           Not supported: the pinned ggml RPC server reports the device's own
                         free memory (split layers with the client's tensorSplit instead)
  -h, --help             Show this help`;

export const DEMO_HELP = `Usage: llamux demo [options]

Builds the scripted "demo" model (a tiny GGUF whose greedy output is a known script) if it is
missing, then runs a two-turn agent loop: the model calls get_weather, the tool answers, the
model answers in text. Prints the events and each turn's cache report.

Options:
      --dir DIR   Where the demo model lives (default .cache/demo under the current directory)
      --json      Print events as JSON lines
  -h, --help      Show this help`;

export const INSPECT_HELP = `Usage: llamux inspect MODEL [options]

Prints a GGUF model's metadata, its chat template and the tool-call markers detected from its
vocabulary and template.

Options:
      --json           Print JSON
      --template       Print the whole chat template
  -h, --help           Show this help`;

export const DOCTOR_HELP = `Usage: llamux doctor [--model PATH] [options]

Prints the CPU and the ggml CPU variant in use, the devices llama.cpp sees and their free
memory, and with --model the plan gpuLayers 'auto' would load it with (layers per device, the
context size) and why. Reads only the model's GGUF header.

Options:
  -m, --model PATH     GGUF model file to plan for
      --ctx N          Context size to fit beside the layers (default 4096)
      --parallel N     Sequences the context will run (reported)
      --json           Print JSON
  -h, --help           Show this help`;

export const BENCH_HELP = `Usage: llamux bench [args]

Runs bench/index.ts of a llamux checkout with tsx (e.g. "llamux bench --quick --suite engine").
The benchmarks are not part of the published package.`;
