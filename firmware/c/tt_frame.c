/* tt_frame.c — see tt_frame.h. */
#include "tt_frame.h"

#include <string.h>

#include "tt_serial.h"

uint32_t tt_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

static uint32_t tt_get_le32(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static void tt_put_le32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

int tt_frame_receive(tt_request *req, uint8_t *image, size_t image_bytes)
{
    uint8_t head[7];
    uint8_t previous = 0, byte;
    for (;;) {  /* resynchronize on the magic "Tt" (commands are upper-case letters, so it is unambiguous) */
        byte = tt_serial_getc();
        if (previous == 'T' && byte == 't') {
            break;
        }
        previous = byte;
    }
    for (size_t i = 0; i < sizeof head; i++) {
        head[i] = tt_serial_getc();
    }
    const char command = (char)head[0];
    const uint32_t length = tt_get_le32(head + 1);
    const int with_image = command == 'T' || command == 'P' || command == 'R';  /* R: the field runtime's */
    if (!with_image && command != 'I' && command != 'S' && command != 'L' && command != 'D' && command != 'Q') {
        tt_frame_error("unknown command");
        return -1;
    }
    req->command = command;
    req->label = (int)(int16_t)((uint16_t)head[5] | ((uint16_t)head[6] << 8));
    req->length = length;
    req->crc = tt_crc32(0, head, sizeof head);
    if (command == 'L') {  /* the caller streams the payload */
        return 0;
    }
    if (length != (with_image ? image_bytes : 0u)) {
        tt_frame_error(with_image ? "image length is not this model's input size" : "unexpected payload");
        return -1;
    }
    if (with_image && image == NULL) {  /* the caller streams the image */
        return 0;
    }
    if (tt_frame_check(tt_frame_read(req->crc, image, length)) != 0) {
        tt_frame_error("CRC mismatch");
        return -1;
    }
    return 0;
}

uint32_t tt_frame_read(uint32_t crc, uint8_t *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bytes[i] = tt_serial_getc();
    }
    return tt_crc32(crc, bytes, n);
}

int tt_frame_check(uint32_t crc)
{
    uint8_t tail[4];
    for (size_t i = 0; i < sizeof tail; i++) {
        tail[i] = tt_serial_getc();
    }
    return crc == tt_get_le32(tail) ? 0 : -1;
}

uint32_t tt_frame_begin(char command, uint32_t length)
{
    uint8_t head[7] = {'t', 'T', (uint8_t)command};
    tt_put_le32(head + 3, length);
    tt_serial_write(head, sizeof head);
    return tt_crc32(0, head + 2, 5);
}

uint32_t tt_frame_part(uint32_t crc, const void *data, size_t n)
{
    tt_serial_write((const uint8_t *)data, n);
    return tt_crc32(crc, (const uint8_t *)data, n);
}

void tt_frame_end(uint32_t crc)
{
    uint8_t tail[4];
    tt_put_le32(tail, crc);
    tt_serial_write(tail, sizeof tail);
}

void tt_frame_reply(char command, const void *a, size_t na, const void *b, size_t nb)
{
    uint32_t crc = tt_frame_begin(command, (uint32_t)(na + nb));
    crc = tt_frame_part(crc, a, na);
    tt_frame_end(tt_frame_part(crc, b, nb));
}

void tt_frame_error(const char *message)
{
    tt_frame_reply('E', message, strlen(message), NULL, 0);
}
