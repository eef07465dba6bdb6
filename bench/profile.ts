import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Where tollgate's CPU goes: a V8 profile (`node --cpu-prof`) taken while ghz loads it, as self
 * time grouped by who owns the code, and the functions that cost the most. Idle time is left out,
 * so the shares are of the time the process was busy.
 */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  busySeconds: number;
  /** Share of busy time, in percent, by owner: tollgate, grpc-js, Node's http2, GC... */
  owners: { owner: string; percent: number }[];
  functions: { name: string; percent: number }[];
}

const OWNERS: [RegExp, string][] = [
  [/\/dist\/|\/\.cache\/bench\/src\//, "tollgate's code"],
  [/node_modules\/@grpc\/grpc-js\//, 'grpc-js'],
  [
    /node_modules\/(ioredis|redis-parser|redis-errors|cluster-key-slot|standard-as-callback)\//,
    'ioredis',
  ],
  [/node_modules\/(protobufjs|@protobufjs)\//, 'protobufjs (encoding the reply)'],
  [/node_modules\/prom-client\//, 'prom-client'],
  [/^node:internal\/http2\//, "Node's http2"],
  [/^node:/, "Node's other internals (streams, events, timers, net)"],
  [/node_modules\//, 'other libraries'],
];

function ownerOf(frame: ProfileNode['callFrame']): string {
  switch (frame.functionName) {
    case '(garbage collector)':
      return 'garbage collection';
    case '(program)':
      return 'V8 and native code outside JavaScript';
    case '(idle)':
      return 'idle';
    case 'writeUtf8String':
    case 'writeBuffer':
    case 'writev':
      return SOCKET_WRITES;
  }
  return ownerOfCode(frame);
}

const SOCKET_WRITES = 'socket writes (the system calls)';

function ownerOfCode(frame: ProfileNode['callFrame']): string {
  for (const [pattern, owner] of OWNERS) if (pattern.test(frame.url)) return owner;
  return frame.url === '' ? 'V8 built-ins' : 'other';
}

/**
 * Who asked for a socket write: the nearest caller outside Node's own code (ioredis writing a
 * command, say), or Node's http2 when no such caller is on the stack.
 */
function writerOf(id: number, parents: Map<number, ProfileNode>): string {
  let http2 = false;
  for (let node = parents.get(id); node; node = parents.get(node.id)) {
    const owner = ownerOfCode(node.callFrame);
    if (owner === "Node's http2") http2 = true;
    else if (!owner.startsWith("Node's") && owner !== 'V8 built-ins' && owner !== 'other')
      return owner;
  }
  return http2 ? "Node's http2" : 'unknown';
}

export function summarizeProfile(profile: CpuProfile, top = 25): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parents = new Map<number, ProfileNode>();
  for (const node of profile.nodes)
    for (const child of node.children ?? []) parents.set(child, node);
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) =>
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)),
  );
  const owners = new Map<string, number>();
  const functions = new Map<string, number>();
  let busy = 0;
  for (const [id, micros] of self) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) continue;
    let owner = ownerOf(frame);
    if (owner === 'idle') continue;
    if (owner === SOCKET_WRITES) owner = `${SOCKET_WRITES}, for ${writerOf(id, parents)}`;
    busy += micros;
    owners.set(owner, (owners.get(owner) ?? 0) + micros);
    const file = frame.url.split('/').slice(-2).join('/');
    const name = `${frame.functionName || '(anonymous)'}${file ? ` ${file}:${frame.lineNumber + 1}` : ''}`;
    functions.set(name, (functions.get(name) ?? 0) + micros);
  }
  const ranked = (map: Map<string, number>) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .map(([name, micros]) => ({ name, percent: (100 * micros) / busy }));
  return {
    busySeconds: busy / 1e6,
    owners: ranked(owners).map(({ name, percent }) => ({ owner: name, percent })),
    functions: ranked(functions).slice(0, top),
  };
}

/** The one profile a process wrote into `dir` on exit. */
export function readProfile(dir: string): CpuProfile {
  const files = readdirSync(dir).filter((name) => name.endsWith('.cpuprofile'));
  if (files.length !== 1)
    throw new Error(`expected one .cpuprofile in ${dir}, found ${files.length}`);
  return JSON.parse(readFileSync(join(dir, files[0]!), 'utf8')) as CpuProfile;
}
