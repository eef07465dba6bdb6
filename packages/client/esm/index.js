// The ES module entry re-exports the CommonJS build, so that `import` and `require` share one copy
// of the client and of its error classes (`instanceof TollgateError` holds across both). The
// names are listed so that the namespace holds them alone, without CommonJS's `__esModule`.
export {
  createRateLimitClient,
  createTollgateClient,
  TollgateError,
  TollgateRequestError,
  TollgateUnavailableError,
} from '../dist/index.js';
