export declare const PREFACE: Buffer;
export declare function frame(
  type: number,
  flags: number,
  streamId: number,
  payload: Buffer,
): Buffer;
export declare function grpcHeaderBlock(path: string): Buffer;
