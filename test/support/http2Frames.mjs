// Raw HTTP/2 frames for clients that must do what Node's own client will not (reset a stream
// before it half-closes it, never read): shared by the rapid-reset attacker, which runs as a
// process of its own, and the tests.
import { Buffer } from 'node:buffer';

/** The client connection preface. */
export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** One frame: its 9-byte header, then `payload`. */
export function frame(type, flags, streamId, payload) {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(streamId, 5);
  return Buffer.concat([header, payload]);
}

const literal = (text) => Buffer.concat([Buffer.from([text.length]), Buffer.from(text)]);

/**
 * HPACK for a gRPC call to `path`: :method POST and :scheme http (static), then :path,
 * :authority, content-type application/grpc and te: trailers as literals without indexing.
 */
export function grpcHeaderBlock(path) {
  return Buffer.concat([
    Buffer.from([0x83, 0x86, 0x04]),
    literal(path),
    Buffer.from([0x01]),
    literal('tollgate'),
    Buffer.from([0x0f, 0x10]),
    literal('application/grpc'),
    Buffer.from([0x00]),
    literal('te'),
    literal('trailers'),
  ]);
}
