/**
 * Follows the gRPC framing of a request stream (each message a 5-byte prefix, a flag and a
 * 32-bit length, then its bytes), so that the guard can count the bytes of a long-lived
 * stream's message still arriving, and let them go once it has arrived, as it does for the whole
 * request of a short call.
 */
const PREFIX_BYTES = 5;

export interface MessageFraming {
  /** Takes the next chunk of the stream; returns the bytes of the message still unfinished after it. */
  add(chunk: Buffer): number;
}

export function createMessageFraming(): MessageFraming {
  const prefix = Buffer.alloc(PREFIX_BYTES);
  let prefixHeld = 0;
  /** Bytes of the current message's body still to come; undefined while its prefix arrives. */
  let bodyLeft: number | undefined;
  /** Bytes of the current message (prefix included) received so far. */
  let unfinished = 0;
  return {
    add(chunk) {
      let at = 0;
      while (at < chunk.length) {
        if (bodyLeft === undefined) {
          const taken = Math.min(PREFIX_BYTES - prefixHeld, chunk.length - at);
          chunk.copy(prefix, prefixHeld, at, at + taken);
          prefixHeld += taken;
          unfinished += taken;
          at += taken;
          if (prefixHeld < PREFIX_BYTES) break;
          prefixHeld = 0;
          bodyLeft = prefix.readUInt32BE(1);
        } else {
          const taken = Math.min(bodyLeft, chunk.length - at);
          bodyLeft -= taken;
          unfinished += taken;
          at += taken;
        }
        if (bodyLeft === 0) {
          bodyLeft = undefined;
          unfinished = 0;
        }
      }
      return unfinished;
    },
  };
}
