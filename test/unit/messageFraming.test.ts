import { describe, expect, it } from 'vitest';
import { createMessageFraming } from '../../src/servers/grpc/messageFraming.js';

const frame = (length: number, sent = length) => {
  const bytes = Buffer.alloc(5 + sent, 1);
  bytes[0] = 0;
  bytes.writeUInt32BE(length, 1);
  return bytes;
};

describe('the bytes of a stream message still arriving', () => {
  it('grow with the message and fall to 0 once it is whole', () => {
    const framing = createMessageFraming();
    const message = frame(100);
    expect(framing.add(message.subarray(0, 3))).toBe(3);
    expect(framing.add(message.subarray(3, 50))).toBe(50);
    expect(framing.add(message.subarray(50))).toBe(0);
  });

  it('count only the unfinished one when a chunk ends one message and starts the next', () => {
    const framing = createMessageFraming();
    const chunk = Buffer.concat([frame(10), frame(0), frame(1_000_000, 20)]);
    expect(framing.add(chunk)).toBe(25);
    expect(framing.add(Buffer.alloc(999_980))).toBe(0);
    expect(framing.add(frame(7).subarray(0, 9))).toBe(9);
  });
});
