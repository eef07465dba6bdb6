/** A call that failed; `grpcCode` names its gRPC status, e.g. `INTERNAL`. */
export class TollgateError extends Error {
  override readonly name: string = 'TollgateError';
  constructor(
    message: string,
    readonly grpcCode: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** tollgate refused the request as malformed (INVALID_ARGUMENT); the message is tollgate's. */
export class TollgateRequestError extends TollgateError {
  override readonly name = 'TollgateRequestError';
}

/** tollgate could not be reached or did not answer within the deadline. */
export class TollgateUnavailableError extends TollgateError {
  override readonly name = 'TollgateUnavailableError';
}
