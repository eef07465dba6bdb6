import { describe, expect, it } from 'vitest';
import { briefError, grpcLogLine } from '../../src/core/logger.js';

describe('briefError', () => {
  it('keeps the type, the message on one line, the code and the cause, and no stack', () => {
    const error = Object.assign(
      new Error('reading rules failed:\n  line 3\n', { cause: new Error('EACCES: denied') }),
      { code: 'E_RULES' },
    );
    expect(briefError(error)).toEqual({
      type: 'Error',
      message: 'reading rules failed: line 3',
      code: 'E_RULES',
      cause: 'EACCES: denied',
    });
  });

  it("leaves out grpc-js's empty resolution note, and bounds a long message", () => {
    const grpc = new Error('14 UNAVAILABLE: No connection established. Resolution note: ');
    expect(briefError(grpc)).toEqual({
      type: 'Error',
      message: '14 UNAVAILABLE: No connection established',
    });
    const long = briefError(new Error('x'.repeat(5_000))) as { message: string };
    expect(long.message.length).toBeLessThanOrEqual(1_001);
  });

  it('passes what is not an Error as it is', () => {
    expect(briefError('plain')).toBe('plain');
  });
});

describe('grpcLogLine', () => {
  it('joins its arguments on one line, and drops an empty note', () => {
    expect(grpcLogLine(['Connection to', 'x:1\nrejected'])).toBe('Connection to x:1 rejected');
    expect(grpcLogLine(['Resolution note: '])).toBeUndefined();
    expect(grpcLogLine(['  '])).toBeUndefined();
  });
});
