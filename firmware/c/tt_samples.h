/* tt_samples.h — the sample file the host writes for the QEMU harness (tinytrain/firmware/samples.py).
 *
 *   offset        size      field
 *   0             4         magic "TTDS"
 *   4             4         version, uint32 little-endian (1)
 *   8             4         count N, uint32 LE
 *   12            4         sample_bytes S, uint32 LE (= TT_INPUT_BYTES: one int8 NHWC image, the model's input)
 *   16            N * S     images, int8, in the order they are used (a training file: one per step)
 *   16 + N * S    N * 4     labels, int32 LE
 */
#ifndef TT_SAMPLES_H
#define TT_SAMPLES_H

#define TT_SAMPLES_MAGIC "TTDS"
#define TT_SAMPLES_VERSION 1u
#define TT_SAMPLES_HEADER_BYTES 16u

#endif /* TT_SAMPLES_H */
