// Type-aware lint: the rules that catch lost promises matter most in a proxy,
// where an unawaited send is a request that may or may not have reached the gateway.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// The dependency direction (docs/architecture.md): each layer imports only from the layers before it.
// errors -> memory -> time -> config -> inbound -> observability -> upstream -> state -> signing -> token ->
// idempotency -> limits -> egress -> postback -> contract -> start -> app -> tools -> cli -> main. The simulator
// (packages/simulator) and the sidecar import nothing of each other: it is an independent verifier, so that a shared
// mistake cannot make both sides agree, and the sidecar's image does not carry it.
const INNER = [
  'errors',
  'memory',
  'time',
  'config',
  'inbound',
  'observability',
  'upstream',
  'state',
  'signing',
  'token',
  'idempotency',
  'limits',
  'egress',
  'postback',
  'contract',
];
/** What puts the parts together (src/start/: a builder per subsystem, its shutdown) and the programs. */
const OUTER = ['start', 'app', 'tools', 'cli', 'main'];
const ORDER = [...INNER, ...OUTER];
/** Each layer and the layers it must not import: every one after it. */
const LAYERS = Object.fromEntries(ORDER.map((layer, i) => [layer, ORDER.slice(i + 1)]));

const MODULE_FILES = { errors: 'src/errors.ts', app: 'src/app.ts', main: 'src/main.ts' };

/** Why Date's text methods are not used in src/ (numbers' toLocaleString loads ICU's locale data alike). */
const LOCAL_TIME_TEXT = "loads ICU's time-zone or locale data for the life of the process: use src/time/utc-time.ts.";

const SIMULATOR_STANDS_APART = {
  group: ['@signing-sidecar/simulator', '**/packages/simulator/**'],
  message: 'the sidecar must not import the simulator: see docs/architecture.md.',
};

/**
 * An ES module import of a built-in reads all of its exports: node:tls's `rootCertificates` getter then keeps Node's
 * bundled roots as strings for the life of the process (0.2 MB), whatever the settings. Refused everywhere in src/
 * but the operator tools (TLS_LAYERS: they connect with TLS themselves, once).
 */
const BUNDLED_ROOTS = {
  message:
    "keeps Node's bundled root certificates resident: use src/upstream/trusted-cas.ts, or process.getBuiltinModule.",
};
const NODE_TLS = ['node:tls', 'tls'].map((name) => ({ name, ...BUNDLED_ROOTS }));
const TLS_LAYERS = new Set(['tools']);

const from = (layer) => (MODULE_FILES[layer] ? './' : '../');

function dependencyDirection() {
  return Object.entries(LAYERS).map(([layer, later]) => ({
    files: [MODULE_FILES[layer] ?? `src/${layer}/**/*.ts`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: TLS_LAYERS.has(layer) ? [] : NODE_TLS,
          patterns: [
            ...later.map((name) => ({
              // Relative import paths, as written from a top-level file (./x) or from inside a layer folder (../x).
              group: [MODULE_FILES[name] ? `${from(layer)}${name}.js` : `${from(layer)}${name}/**`],
              message: `${layer} must not import ${name}: see the dependency direction in docs/architecture.md.`,
            })),
            SIMULATOR_STANDS_APART,
          ],
        },
      ],
    },
  }));
}

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '.exp/**', '.scratch/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // node:test's describe/it return promises that the runner itself tracks.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            {
              from: 'package',
              package: 'node:test',
              name: ['describe', 'it', 'test', 'suite', 'before', 'after', 'beforeEach', 'afterEach'],
            },
          ],
        },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  ...dependencyDirection(),
  {
    // V8 allocates a function written straight into a property in the old generation: from there it keeps what it
    // closes over (often a whole request) alive past every young-generation collection, to be promoted and freed
    // only by a full one. Measured in docs/performance.md, "Garbage collection".
    files: ['src/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector:
            "AssignmentExpression[left.type='MemberExpression'][right.type=/^(ArrowFunctionExpression|FunctionExpression)$/]",
          message: 'make the function in a local, then assign the local (docs/performance.md, "Garbage collection").',
        },
        // Date() without new is the local time as text (below).
        { selector: "CallExpression[callee.name='Date']", message: LOCAL_TIME_TEXT },
      ],
    },
  },
  {
    // Date's text methods read the host's time zone through ICU the first time one runs, and its data then stays
    // resident: src/time/utc-time.ts writes the sidecar's UTC times instead. Not caught here: a Date given to
    // JSON.stringify or to a log call (both call toISOString), or made text by a template.
    files: ['src/**/*.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        ...['toISOString', 'toUTCString', 'toGMTString', 'toJSON', 'toTimeString', 'toDateString']
          .concat(['toLocaleString', 'toLocaleDateString', 'toLocaleTimeString'])
          .map((property) => ({ property, message: LOCAL_TIME_TEXT })),
      ],
    },
  },
  {
    files: ['packages/simulator/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/src/**', 'signing-sidecar'], message: 'the simulator imports nothing of the sidecar.' },
          ],
        },
      ],
    },
  },
  {
    files: ['eslint.config.js', 'packages/*/bin/*.js', 'examples/**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
);
