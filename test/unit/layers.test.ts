// The architecture as a check that can fail: src/ is folders by concern in layers, each layer
// importing only its own and lower ones, with no import cycle. The order is written down once,
// here, and drawn in docs/development.md.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** Lowest first. A module may import from its own layer and the layers before it. */
export const LAYERS = [
  'core',
  'rules',
  'store',
  'decision',
  'rlqs',
  'observability',
  'servers',
  'process',
  'cli',
] as const;
/** The entry points at src/'s root, above every layer. */
const ENTRIES = ['main.ts', 'index.ts'];

const src = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src');

type Graph = Map<string, string[]>;

function modules(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return modules(path);
    return entry.name.endsWith('.ts') ? [relative(src, path).split('\\').join('/')] : [];
  });
}

/** Each module's imports of other modules of src/, type-only ones included. */
function importGraph(): Graph {
  const graph: Graph = new Map();
  for (const module of modules(src)) {
    const text = readFileSync(join(src, module), 'utf8');
    const imports = ts
      .preProcessFile(text, true, true)
      .importedFiles.map((file) => file.fileName)
      .filter((name) => name.startsWith('.'))
      .map((name) =>
        posix.normalize(posix.join(posix.dirname(module), name)).replace(/\.js$/, '.ts'),
      );
    graph.set(module, imports);
  }
  return graph;
}

function layerOf(module: string): number {
  if (ENTRIES.includes(module)) return LAYERS.length;
  return LAYERS.indexOf(module.split('/')[0] as (typeof LAYERS)[number]);
}

/** Every import that goes up a layer, as `from -> to`. */
export function upwardImports(graph: Graph): string[] {
  const found: string[] = [];
  for (const [from, imports] of graph) {
    for (const to of imports) if (layerOf(to) > layerOf(from)) found.push(`${from} -> ${to}`);
  }
  return found;
}

/** The import cycles, each as the modules on it (Tarjan's strongly connected components). */
export function cycles(graph: Graph): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (module: string) => {
    index.set(module, next);
    low.set(module, next);
    next += 1;
    stack.push(module);
    onStack.add(module);
    for (const to of graph.get(module) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(module, Math.min(low.get(module)!, low.get(to)!));
      } else if (onStack.has(to)) {
        low.set(module, Math.min(low.get(module)!, index.get(to)!));
      }
    }
    if (low.get(module) !== index.get(module)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== module);
    if (component.length > 1 || graph.get(module)?.includes(module)) found.push(component.sort());
  };
  for (const module of graph.keys()) if (!index.has(module)) visit(module);
  return found;
}

/**
 * What a module loads when it runs: its imports and re-exports less those of types only, which
 * the compiler erases, and its dynamic imports.
 */
function runtimeImports(module: string): string[] {
  const text = readFileSync(join(src, module), 'utf8');
  const file = ts.createSourceFile(module, text, ts.ScriptTarget.Latest);
  const found: string[] = [];
  for (const statement of file.statements) {
    if (ts.isImportDeclaration(statement)) {
      const clause = statement.importClause;
      const bindings = clause?.namedBindings;
      const typesOnly =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            bindings !== undefined &&
            ts.isNamedImports(bindings) &&
            bindings.elements.every((element) => element.isTypeOnly)));
      if (!typesOnly) found.push((statement.moduleSpecifier as ts.StringLiteral).text);
    } else if (ts.isExportDeclaration(statement) && statement.moduleSpecifier !== undefined) {
      const bindings = statement.exportClause;
      const typesOnly =
        statement.isTypeOnly ||
        (bindings !== undefined &&
          ts.isNamedExports(bindings) &&
          bindings.elements.every((element) => element.isTypeOnly));
      if (!typesOnly) found.push((statement.moduleSpecifier as ts.StringLiteral).text);
    }
  }
  // import('...'), wherever it is.
  const walk = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      found.push(node.arguments[0].text);
    }
    ts.forEachChild(node, walk);
  };
  walk(file);
  return found;
}

/** An import of a module: what it names, the package or path, and the bindings it takes. */
interface ImportOf {
  from: string;
  names: string[];
}

/** Every import and re-export of a module, type-only ones included, with the names it binds. */
function importsOf(module: string): ImportOf[] {
  const text = readFileSync(join(src, module), 'utf8');
  const file = ts.createSourceFile(module, text, ts.ScriptTarget.Latest);
  const found: ImportOf[] = [];
  for (const statement of file.statements) {
    if (ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) {
      if (statement.moduleSpecifier === undefined) continue;
      const names: string[] = [];
      const bindings = ts.isImportDeclaration(statement)
        ? statement.importClause?.namedBindings
        : statement.exportClause;
      if (bindings && (ts.isNamedImports(bindings) || ts.isNamedExports(bindings))) {
        for (const element of bindings.elements) {
          names.push((element.propertyName ?? element.name).text);
        }
      }
      found.push({ from: (statement.moduleSpecifier as ts.StringLiteral).text, names });
    }
  }
  return found;
}

/**
 * A dependency kept to a few places: a package, or a binding by name (a type that carries the
 * package's objects), which only modules under `allowed` (folders ending in '/', or files) import.
 */
export interface Confinement {
  what: string;
  allowed: string[];
}

/** Every import of a confined package or binding from outside its places, as `module -> what`. */
export function confinementBreaches(
  modules: readonly string[],
  imports: (module: string) => ImportOf[],
  confinements: readonly Confinement[],
): string[] {
  const found: string[] = [];
  for (const module of modules) {
    for (const { what, allowed } of confinements) {
      if (
        allowed.some((place) => (place.endsWith('/') ? module.startsWith(place) : module === place))
      ) {
        continue;
      }
      for (const entry of imports(module)) {
        if (entry.from === what || entry.names.includes(what)) found.push(`${module} -> ${what}`);
      }
    }
  }
  return found;
}

/**
 * grpc-js is the servers' (and the clients' that rules and tracing keep to the xDS server and
 * the OTLP collector); ioredis, and the connection the store hands its own parts, the store's.
 * So rlqs/, decision/ and the rest are libraries that know neither.
 */
const CONFINED: Confinement[] = [
  {
    what: '@grpc/grpc-js',
    allowed: ['servers/', 'rules/xdsClient.ts', 'observability/otlpExporter.ts'],
  },
  { what: 'ioredis', allowed: ['store/'] },
  { what: 'RedisAccess', allowed: ['store/'] },
];

/** Every package that `entry` loads at run time, through the modules of src/ it loads. */
function packagesLoadedBy(entry: string): Set<string> {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const visit = (module: string) => {
    if (seen.has(module)) return;
    seen.add(module);
    for (const name of runtimeImports(module)) {
      if (!name.startsWith('.')) packages.add(name);
      else visit(posix.normalize(posix.join(posix.dirname(module), name)).replace(/\.js$/, '.ts'));
    }
  };
  visit(entry);
  return packages;
}

describe('the layers of src/', () => {
  const graph = importGraph();

  it('puts every module in a layer folder, or at the root as an entry point', () => {
    const outside = [...graph.keys()].filter((module) => layerOf(module) < 0);
    expect(outside).toEqual([]);
    expect(graph.size).toBeGreaterThan(50);
  });

  it('imports only from its own layer and the layers below', () => {
    expect(upwardImports(graph)).toEqual([]);
  });

  it('has no import cycle', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('imports only modules that exist', () => {
    const missing = [...graph].flatMap(([from, imports]) =>
      imports.filter((to) => !graph.has(to)).map((to) => `${from} -> ${to}`),
    );
    expect(missing).toEqual([]);
  });

  it('opens every module with a comment, before its first export', () => {
    const silent = [...graph.keys()].filter((module) => {
      const text = readFileSync(join(src, module), 'utf8');
      const firstExport = text.search(/^export /m);
      const firstComment = text.search(/^\s*(\/\*\*|\/\/)/m);
      return firstComment < 0 || (firstExport >= 0 && firstComment > firstExport);
    });
    expect(silent).toEqual([]);
  });

  it('serves without loading @tollgate/client: rebuilding the client leaves running services be', () => {
    const loaded = packagesLoadedBy('main.ts');
    expect(loaded).toContain('ioredis');
    expect([...loaded].filter((name) => name.startsWith('@tollgate/'))).toEqual([]);
    // The command line's query imports it (the build points that import at the build's own copy
    // of the client, dist/vendor/client/), and the check sees that.
    expect(packagesLoadedBy('cli/query.ts')).toContain('@tollgate/client');
  });

  it('keeps grpc-js to the servers and the two clients, and ioredis and its connection to the store', () => {
    expect(confinementBreaches([...graph.keys()], importsOf, CONFINED)).toEqual([]);
    // The places are real: each confined name is imported where it is allowed.
    for (const { what } of CONFINED) {
      const users = [...graph.keys()].filter((module) =>
        importsOf(module).some((entry) => entry.from === what || entry.names.includes(what)),
      );
      expect(users.length, what).toBeGreaterThan(0);
    }
  });

  it('finds what it looks for: an upward import and a cycle in a made-up graph', () => {
    const bad: Graph = new Map([
      ['decision/plan.ts', ['servers/grpc/server.ts', 'decision/answer.ts']],
      ['decision/answer.ts', ['decision/plan.ts']],
      ['servers/grpc/server.ts', []],
    ]);
    expect(upwardImports(bad)).toEqual(['decision/plan.ts -> servers/grpc/server.ts']);
    expect(cycles(bad)).toEqual([['decision/answer.ts', 'decision/plan.ts']]);
  });

  it('finds a confined import outside its places in made-up modules', () => {
    const made: Record<string, ImportOf[]> = {
      'rlqs/stream.ts': [{ from: '@grpc/grpc-js', names: [] }],
      'rlqs/demand.ts': [{ from: '../store/redisStore.js', names: ['RedisAccess'] }],
      'store/redisStore.ts': [{ from: 'ioredis', names: ['Redis'] }],
      'servers/grpc/server.ts': [{ from: '@grpc/grpc-js', names: [] }],
    };
    expect(
      confinementBreaches(Object.keys(made), (module) => made[module] ?? [], CONFINED),
    ).toEqual(['rlqs/stream.ts -> @grpc/grpc-js', 'rlqs/demand.ts -> RedisAccess']);
  });
});
