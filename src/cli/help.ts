// The help texts of the `llamux` command (src/cli.ts).
import { MARKER_PRESETS } from '../engine/markers.js';

export const MAIN_HELP = `Usage: llamux <command> [options]

Commands:
  serve       Start an OpenAI- and Anthropic-compatible server
  run         Generate from a prompt (text to stdout, a prefill progress bar on stderr)
  rpc-server  Serve this machine's devices to other llamux processes (ggml RPC)
  demo        Run a two-turn tool-calling agent loop on a scripted model
  inspect     Show a model's metadata and its tool-call markers
  doctor      Show devices, free memory, the CPU variant and the GPU plan for a model
  pull        Download a model (org/repo:QUANT, org/repo/file.gguf or a URL) once, verified
  ls          List the pulled models
  rm          Remove a pulled model
  bench       Run the benchmarks (from a checkout of the repository)

Options:
  -h, --help      Show help (also: llamux <command> --help)
  -v, --version   Show the version

Run "llamux <command> --help" for a command's options.`;

export const SERVE_HELP = `Usage: llamux serve --model PATH|REFERENCE [options]
       llamux serve --models DIR|FILE [options]

Starts a server with POST /v1/chat/completions (OpenAI), POST /v1/messages (Anthropic),
GET /v1/models, GET /health and GET /metrics. With --models (router mode) each request's
"model" picks one of several models, loaded on demand; POST /models/load and /models/unload
load and unload one, and GET /v1/models shows each model's state.

Options:
  -m, --model PATH          GGUF model file, or a reference (org/repo:QUANT ...: the pulled
                            model, pulled first when missing; see "llamux pull") (this or --models)
      --models DIR|FILE     Router mode: a folder of GGUF models (named by file stem; split
                            files and subfolders as one model) or a JSON config
                            {"name": {"path", "pinned", "contextOptions", "loadOptions"}}
      --models-max N        Router mode: models loaded at once; the least recently used idle
                            one unloads for another (default 4; 0: no limit)
      --sleep-idle-seconds S  Router mode: unload a model unused for S seconds (pinned ones
                            never; default: never)
      --rpc HOST:PORT,...   Place the model's layers on these "llamux rpc-server" processes
      --mmproj PATH         A multimodal projector (mmproj GGUF): user messages may hold images
                            (OpenAI image_url data: URLs, Anthropic base64 image blocks)
      --allow-remote-media  Fetch http(s) image URLs of requests (10 s, mediaLimits.maxBytes,
                            3 redirects, image/* only); default: refused, nothing fetched
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
      --prompt-cache-ttl S[,L]  Seconds an Anthropic cache_control breakpoint with ttl "5m"
                            (and "1h") keeps its prefix in those tiers (default 300,3600)
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
      --lora PATH           A LoRA adapter of the model, applied at scale 1 (repeatable);
                            requests set scales with "lora": [{"id": 0, "scale": 0.5}]
      --lora-scaled PATH S  The same at scale S (repeatable); GET /lora-adapters lists them
      --store PATH          SQLite file of the tool-call store and the stored responses (default: in memory)
      --chat-template FILE  Jinja chat template replacing the model's own
      --max-body BYTES      Largest accepted request body (default 4194304)
      --max-prompt-bytes N  Largest message and tool text per request (default 1048576)
      --overflow POLICY     A prompt longer than a sequence: error (400, the default) or
                            truncate-middle (drop its middle, report usage.truncated_tokens)
      --context-shift       A generation that fills its sequence keeps the request's n_keep
                            first tokens, drops the oldest half of the rest and goes on
      --keep-reasoning      Keep the turns it generated as generated after a new user message,
                            where the template drops earlier reasoning (reuses the KV; a
                            departure from the template; per request: keep_reasoning)
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
memory, and with --model the plan gpuLayers 'auto' would load it with (layers per device, a
MoE model's experts in system RAM, the context size, bytes each) and why. Reads only the
model's GGUF header.

Options:
  -m, --model PATH     GGUF model file to plan for
      --ctx N          Context size to fit beside the layers (default 4096)
      --parallel N     Sequences the context will run (reported)
      --gpu-memory MIB[,MIB...]
                       Plan for GPUs with this much free memory (one figure per GPU)
                       instead of the ones llama.cpp sees
      --cpu-moe        Plan with every layer's MoE experts in system RAM (loadModel cpuMoe)
      --n-cpu-moe N    Plan with the experts of the first N layers in RAM (nCpuMoe)
      --json           Print JSON
  -h, --help           Show this help`;

export const BENCH_HELP = `Usage: llamux bench [args]

Runs bench/index.ts of a llamux checkout with tsx (e.g. "llamux bench --quick --suite engine").
The benchmarks are not part of the published package.`;

export const RUN_HELP = `Usage: llamux run --model PATH [--prompt TEXT | --file PATH | < stdin] [options]

Generates from one prompt: the text streams to stdout; model loading, a prefill progress bar
(prompts of 256 tokens or more, on a terminal) and the final numbers go to stderr.

Options:
  -m, --model PATH      GGUF model
  -p, --prompt TEXT     The prompt (or --file PATH, or text on stdin)
  -f, --file PATH       Read the prompt from a file
      --chat            Render the prompt as one user message with the model's chat template
  -n, --max-tokens N    Stop after N tokens (default: the model's end of generation)
      --temp T          Temperature (default 0.8; 0 is greedy)
      --seed N          Sampling seed
      --ctx N           Context size (default 4096)
      --threads N       Decode threads
      --context-shift   When the context is full, drop the oldest half after --n-keep tokens and go on
      --n-keep N        Tokens a context shift keeps at the start (BOS besides; -1: the prompt)
      --progress        Draw the progress bar even when stderr is not a terminal
  -q, --quiet           Only the generated text
  -h, --help            Show this help`;

export const PULL_HELP = `Usage: llamux pull REFERENCE [options]

Downloads a model into the models folder once (sha256-verified, resumed after an interruption)
and prints the path of the file to load. REFERENCE is org/repo:QUANT (case-insensitive, e.g.
Qwen/Qwen3-0.6B-GGUF:Q8_0), org/repo (its Q4_K_M, or the first of Q4_K_S, UD-Q4_K_XL, Q4_0,
Q5_K_M, Q6_K, Q8_0, BF16, F16, F32), org/repo/path/file.gguf, or an http(s) URL. Split GGUFs
come whole. A progress bar is drawn on stderr when it is a terminal.

Environment: HF_TOKEN (sent to the hub only), LLAMUX_HF_ENDPOINT (default https://huggingface.co),
LLAMUX_MODELS_DIR (default ~/.cache/llamux/models).

Options:
      --models-dir DIR     The models folder
      --endpoint URL       The hub (a mirror)
      --revision REV       Branch, tag or commit (default main)
      --mmproj             Also pull the repository's vision projector (mmproj*.gguf)
      --mmproj-file FILE   ... this one
      --draft              Also pull the repository's draft / MTP model (*-mtp-*.gguf, *-draft*.gguf)
      --draft-file FILE    ... this one
      --sha256 HEX         Expected sha256 of a URL download
      --force              Download again even if present and verified
  -q, --quiet              No progress
  -h, --help               Show this help`;

export const LS_HELP = `Usage: llamux ls [options]

Lists the pulled models: name, quant, size (all files) and the path to load.

Options:
      --models-dir DIR   The models folder (default $LLAMUX_MODELS_DIR or ~/.cache/llamux/models)
      --json             Print the manifest entries as JSON
  -h, --help             Show this help`;

export const RM_HELP = `Usage: llamux rm REFERENCE [options]

Removes a pulled model's files (those no other pulled model uses) and its manifest entry.
REFERENCE as "llamux ls" shows it (org/repo:Q4_K_M, org/repo/file.gguf, a URL); org/repo
alone removes every quant of it pulled.

Options:
      --models-dir DIR   The models folder (default $LLAMUX_MODELS_DIR or ~/.cache/llamux/models)
  -h, --help             Show this help`;
