// `npm run bench [-- --quick] [-- --suite engine,tools]`: runs benchmark suites and prints tables.
import { runCacheBench } from './workloads/cache.js';
import { runEngineBench } from './workloads/engine.js';
import { runMarkersBench } from './workloads/markers.js';

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const suiteArg = args.find((a) => a.startsWith('--suite='))?.slice('--suite='.length) ?? args[args.indexOf('--suite') + 1];
const suites = (suiteArg && !suiteArg.startsWith('--') ? suiteArg : 'engine,markers,cache,tools').split(',');

const started = Date.now();
for (const suite of suites) {
  if (suite === 'engine') {
    console.log(await runEngineBench({ quick }));
  } else if (suite === 'markers') {
    console.log(await runMarkersBench({ quick }));
  } else if (suite === 'cache') {
    console.log(await runCacheBench({ quick }));
  } else if (suite === 'tools') {
    const { runToolsBench } = await import('./tools.js');
    const r = await runToolsBench({ quick });
    console.log(typeof r === 'string' ? r : JSON.stringify(r, null, 2));
  } else {
    console.error(`unknown suite "${suite}" (known: engine, markers, cache, tools)`);
    process.exitCode = 2;
  }
}
console.log(`\nbench finished in ${((Date.now() - started) / 1000).toFixed(1)} s (${quick ? 'quick' : 'full'} mode)`);
