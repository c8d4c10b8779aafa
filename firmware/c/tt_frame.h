/* tt_frame.h — the frames of the serial protocol (tinytrain/firmware/protocol.py has the full description).
 *
 * Request: "Tt" | command (1) | length uint32 LE | label int16 LE | image or state (length bytes) | CRC-32 LE
 * Reply:   "tT" | command (1) | length uint32 LE | payload (length bytes)               | CRC-32 LE
 * The CRC is CRC-32/IEEE (zlib.crc32) of everything between the magic and the CRC.
 */
#ifndef TT_FRAME_H
#define TT_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define TT_PROTOCOL_VERSION 1

typedef struct {
    char command;     /* 'I', 'T', 'P', 'S' or 'L'; the field runtime's firmware also 'R', 'D' and 'Q' */
    int label;
    uint32_t length;  /* payload bytes */
    uint32_t crc;     /* L: the CRC of the head, to go on with tt_frame_read over the payload */
} tt_request;

/* CRC-32/IEEE over n bytes, continuing from crc (start with 0). */
uint32_t tt_crc32(uint32_t crc, const uint8_t *p, size_t n);

/* Receive the next request. The image (length bytes) goes to image when length == image_bytes for T and P,
 * or length == 0 for I and S. Returns 0, or -1 after answering an E reply (bad command, length or CRC).
 * An L request returns after its head: the caller reads its payload (a state, streamed) with tt_frame_read and
 * its CRC with tt_frame_check, so the state needs no buffer; so does a T or P request (its length checked) when
 * image is NULL: the caller reads the image row by row. */
int tt_frame_receive(tt_request *req, uint8_t *image, size_t image_bytes);

/* The next n payload bytes of a request into bytes; returns the CRC so far (continuing from crc). */
uint32_t tt_frame_read(uint32_t crc, uint8_t *bytes, size_t n);
/* Read the request's CRC; returns 0 when it equals crc (the CRC of its head and payload), else -1. */
int tt_frame_check(uint32_t crc);

/* Send a reply whose payload is the concatenation of two parts (either may be empty). */
void tt_frame_reply(char command, const void *a, size_t na, const void *b, size_t nb);

/* The same, streamed: tt_frame_begin sends the head of a reply of length payload bytes and returns the running CRC;
 * tt_frame_part sends the next n of them and returns the CRC so far; tt_frame_end sends the CRC. The parts must add
 * up to length (the S reply streams the state through them: no copy of it in RAM). */
uint32_t tt_frame_begin(char command, uint32_t length);
uint32_t tt_frame_part(uint32_t crc, const void *data, size_t n);
void tt_frame_end(uint32_t crc);

/* An E reply with an ASCII message. */
void tt_frame_error(const char *message);

#endif /* TT_FRAME_H */
