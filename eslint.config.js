import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'packages/client/dist/',
      'packages/client/proto/',
      'node_modules/',
      'bench/results/',
      '.cache/',
      'coverage/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.strict,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        fetch: 'readonly',
        AbortSignal: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': 'off',
    },
  },
  {
    // A function a reader can hold in mind: longer ones are split into named parts with explicit
    // inputs (docs/development.md, "The map").
    files: ['src/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 100 }] },
  },
  {
    // Tests index into responses they have just asserted the shape of.
    files: ['test/**', 'bench/**'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
