#!/usr/bin/env node
// `npm run test:asan`: builds llama.cpp and the addon with AddressSanitizer and
// UndefinedBehaviorSanitizer into build-asan/, then runs the native and API test suites
// against that build. Node itself is not instrumented, so the ASan runtime must be loaded
// first: LD_PRELOAD=$(gcc -print-file-name=libasan.so). Leak detection is off (Node's own
// allocations at exit would drown the report); UBSan findings abort the test process.
import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const buildDir = join(root, 'build-asan');
let r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], {
  stdio: 'inherit',
  cwd: root,
  env: { ...process.env, LLAMUX_SANITIZE: '1', LLAMUX_BUILD_DIR: buildDir },
});
if (r.status !== 0) process.exit(r.status ?? 1);
const libasan = execFileSync('gcc', ['-print-file-name=libasan.so'], { encoding: 'utf8' }).trim();
const libubsan = execFileSync('gcc', ['-print-file-name=libubsan.so'], { encoding: 'utf8' }).trim();
const suites = process.argv.slice(2).length ? process.argv.slice(2) : ['test/native', 'test/api'];
// Sanitized code runs several times slower: generous timeouts.
r = spawnSync(process.execPath, [join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', '--testTimeout=600000', '--hookTimeout=600000', ...suites], {
  stdio: 'inherit',
  cwd: root,
  env: {
    ...process.env,
    LLAMUX_NATIVE_PATH: join(buildDir, 'Release', 'llamux.node'),
    LD_PRELOAD: `${libasan} ${libubsan}`,
    ASAN_OPTIONS: 'detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1',
    UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1',
  },
});
process.exit(r.status ?? 1);
