"""The boards ``tinytrain firmware`` knows: core, compiler flags, memory map, and how the firmware talks.

QEMU boards run the semihosting harness (samples and results as files on the host); real boards run the
serial harness (samples streamed over a UART, tinytrain/firmware/protocol.py). A real board QEMU also emulates
(``emulator``: netduinoplus2) runs its flashed image under qemu-system-arm with that UART on a local TCP port. The memory map gives where
flash and SRAM start and how much the board has; the linker script uses the compile's budgets, never more.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.cores import CORES
from tinytrain.errors import UsageError


@dataclass(frozen=True)
class Qemu:
    machine: str        # qemu-system-arm (qemu-system-riscv32) -M
    # SysTick tick = NUM/DEN ns = instructions under -icount shift=0 (1 ns each): 25 MHz on MPS2, 32 MHz on MPS3
    # (measured: tests/firmware/test_firmware_qemu.py::test_systick_counts_instructions); RISC-V's minstret: 1/1
    tick_ns: tuple[int, int]
    args: tuple[str, ...] = ()  # more QEMU options (the RISC-V virt machine: -bios none, the core's extensions)


@dataclass(frozen=True)
class Toolchain:
    """How a board's firmware is built and emulated: the cross compiler (Debian package), its C library's link
    options (QEMU boards: semihosting; real boards: none), the startup and tick sources, the linker script template
    (firmware/templates/) and the QEMU binary."""

    prefix: str                    # arm-none-eabi- / riscv64-unknown-elf-
    package: str                   # the Debian package of the compiler
    qemu: str                      # qemu-system-arm / qemu-system-riscv32
    qemu_package: str
    semihost_libs: tuple[str, ...]  # link options of the semihosting C library (QEMU boards)
    bare_libs: tuple[str, ...]      # link options of the C library without an OS (real boards)
    startup: tuple[str, ...]       # firmware/c sources: reset code, ticks
    linker_script: str             # firmware/templates/<this>.j2 -> tinytrain.ld


@dataclass(frozen=True)
class PlatformIO:
    platform: str
    board: str
    upload_protocol: str | None
    note: str


@dataclass(frozen=True)
class Flash:
    """Where the persistent training state lives (firmware/c/tt_persist.h): a driver of
    firmware/c/tt_flash_port.h, the erase and program granularity, and (real boards) the number of the board's last
    flash sector: the state's two slots are the last sectors of flash, the program is linked below them."""

    driver: str
    sector_bytes: int
    program_bytes: int
    last_sector: int = 0


@dataclass(frozen=True)
class Board:
    name: str
    core: str
    cpu_flags: tuple[str, ...]
    flash_origin: int
    flash_max: int      # flash the application may use on this board
    ram_origin: int
    ram_max: int        # SRAM at ram_origin (contiguous)
    vector_irqs: int    # interrupt vectors after the 16 system exceptions (all routed to the fault exit)
    qemu: Qemu | None = None
    pio: PlatformIO | None = None
    uart_driver: str | None = None  # C file of the serial boards' UART (firmware/c/)
    uart: str = ""                  # which UART and pins, for the README
    defines: tuple[tuple[str, str], ...] = ()  # extra #defines of tt_board.h (the UART driver's choices)
    flash: Flash | None = None      # the persistent state's flash (firmware --save-every)
    emulator: str | None = None     # serial boards QEMU emulates: qemu-system-arm -M (the UART on its first -serial)
    toolchain: str = "arm"          # TOOLCHAINS key
    vectors_origin: int | None = None  # where the core reads its vector table at reset, when not at flash_origin
    note: str = ""                  # what the board is and runs, for `tinytrain firmware` and docs/guide/boards.md

    @property
    def harness(self) -> str:
        return "tt_harness_qemu.c" if self.qemu else "tt_harness_serial.c"

    @property
    def tools(self) -> Toolchain:
        return TOOLCHAINS[self.toolchain]


TOOLCHAINS = {
    "arm": Toolchain("arm-none-eabi-", "gcc-arm-none-eabi", "qemu-system-arm", "qemu-system-arm",
                     ("--specs=nano.specs", "--specs=rdimon.specs"), ("--specs=nano.specs", "--specs=nosys.specs"),
                     ("tt_startup.c", "tt_ticks.c"), "tinytrain.ld.j2"),
    # Debian's riscv64-unknown-elf-gcc has the rv32 multilibs (rv32imac/ilp32, rv32imafc/ilp32f) and picolibc's.
    "riscv": Toolchain("riscv64-unknown-elf-", "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
                       "qemu-system-riscv32", "qemu-system-misc",
                       ("--specs=picolibc.specs", "--oslib=semihost"), ("--specs=picolibc.specs", "--oslib=dummyhost"),
                       ("tt_startup_riscv.c", "tt_ticks_riscv.c"), "tinytrain_riscv.ld.j2"),
}


# A board's compiler flags: its core's (tinytrain/cores.py), then the float ABI and FPU its chip has.
M4F = CORES["cortex-m4"].cpu_flags + ("-mfloat-abi=hard", "-mfpu=fpv4-sp-d16")
M7_SP = CORES["cortex-m7"].cpu_flags + ("-mfloat-abi=hard", "-mfpu=fpv5-sp-d16")  # STM32F746: single precision
M7_DP = CORES["cortex-m7"].cpu_flags + ("-mfloat-abi=hard", "-mfpu=fpv5-d16")     # STM32F767: double precision
M55 = CORES["cortex-m55"].cpu_flags + ("-mfloat-abi=hard",)
M33F = CORES["cortex-m33"].cpu_flags + ("-mfloat-abi=hard", "-mfpu=fpv5-sp-d16")  # ARMv8-M mainline, DSP and FPU
M3 = CORES["cortex-m3"].cpu_flags + ("-mfloat-abi=soft",)                           # ARMv7-M, no DSP, no FPU
M0PLUS = CORES["cortex-m0plus"].cpu_flags + ("-mfloat-abi=soft",)                   # ARMv6-M
RV32IMAC = CORES["riscv32"].cpu_flags + ("-march=rv32imac", "-mabi=ilp32", "-mcmodel=medany")  # soft float
RV32IMAFC = CORES["riscv32"].cpu_flags + ("-march=rv32imafc", "-mabi=ilp32f", "-mcmodel=medany")  # the F extension
MB = 1024 * 1024
# QEMU boards: a file on the host through semihosting (firmware/c/tt_flash_semihost.c), NOR rules kept by the driver.
SEMIHOST_FLASH = Flash("tt_flash_semihost.c", 4096, 4)
RISCV_VIRT = Qemu("virt", (1, 1), ("-bios", "none", "-serial", "none", "-monitor", "none", "-chardev", "stdio,id=tt",
                                   "-semihosting-config", "chardev=tt"))



def _stm32(gpio_en: tuple[int, tuple[int, ...]], usart_en: tuple[int, int], tx: tuple[int, int],
           rx: tuple[int, int], af: int, usart: int, clock_hz: int) -> tuple[tuple[str, str], ...]:
    """tt_board.h's defines of firmware/c/tt_uart_stm32.c: the RCC register and bits that clock the GPIO ports, the
    USART's RCC register and bit, the TX and RX pins as (GPIO port, pin), alternate function, USART base and clock."""
    mask = sum(1 << bit for bit in gpio_en[1])
    return (("TT_STM32_GPIO_EN", f"0x{gpio_en[0]:08X}u"), ("TT_STM32_GPIO_EN_MASK", f"0x{mask:X}u"),
            ("TT_STM32_USART_EN", f"0x{usart_en[0]:08X}u"), ("TT_STM32_USART_EN_BIT", str(usart_en[1])),
            ("TT_STM32_TX_GPIO", f"0x{tx[0]:08X}u"), ("TT_STM32_TX", str(tx[1])),
            ("TT_STM32_RX_GPIO", f"0x{rx[0]:08X}u"), ("TT_STM32_RX", str(rx[1])),
            ("TT_STM32_AF", str(af)), ("TT_STM32_USART", f"0x{usart:08X}u"), ("TT_STM32_CLOCK_HZ", f"{clock_hz}u"))


BOARDS: dict[str, Board] = {b.name: b for b in (
    # QEMU's MPS2 images: code RAM at 0 (4 MB), data RAM at 0x20000000.
    Board("qemu-m4", "cortex-m4", M4F, 0x00000000, 4 * MB, 0x20000000, 4 * MB, 32,
          qemu=Qemu("mps2-an386", (40, 1)), flash=SEMIHOST_FLASH),
    Board("qemu-m7", "cortex-m7", M7_SP, 0x00000000, 4 * MB, 0x20000000, 4 * MB, 32,
          qemu=Qemu("mps2-an500", (40, 1)), flash=SEMIHOST_FLASH),
    # The AN547 (QEMU 7.2 hw/arm/mps2-tz.c an547_raminfo, SSE-300): ITCM 512 KB at 0, where the core reads its vector
    # table at reset; DTCM 512 KB at 0x20000000 (the data); the 4 MB of "sram 2" (ISRAM0/1) at 0x21000000, without a
    # memory protection controller in front of it, hold code and weights (the ITCM is too small for a training step).
    Board("qemu-m55", "cortex-m55", M55, 0x21000000, 4 * MB, 0x20000000, 512 * 1024, 32,
          qemu=Qemu("mps3-an547", (125, 4)), flash=SEMIHOST_FLASH, vectors_origin=0x00000000),
    # AN505 (Cortex-M33 with TrustZone): the core boots secure, from the secure alias of the code SSRAM at
    # 0x10000000; data in the secure alias of SSRAM2/3 at 0x38000000 (QEMU hw/arm/mps2-tz.c). 20 MHz system clock.
    Board("qemu-m33", "cortex-m33", M33F, 0x10000000, 4 * MB, 0x38000000, 4 * MB, 64,
          qemu=Qemu("mps2-an505", (50, 1)), flash=SEMIHOST_FLASH,
          note="Cortex-M33 (ARMv8-M mainline): DSP inner products, FPv5-SP hard float; QEMU mps2-an505"),
    Board("qemu-m3", "cortex-m3", M3, 0x00000000, 4 * MB, 0x20000000, 4 * MB, 32,
          qemu=Qemu("mps2-an385", (40, 1)), flash=SEMIHOST_FLASH,
          note="Cortex-M3 (ARMv7-M): portable C, soft-float backward; QEMU mps2-an385"),
    # QEMU's only ARMv6-M machine (microbit: nRF51, Cortex-M0) has 16 KB of RAM, too little for any zoo model's
    # step: the -mcpu=cortex-m0plus code runs on the AN385's Cortex-M3, which executes every ARMv6-M instruction.
    Board("qemu-m0plus", "cortex-m0plus", M0PLUS, 0x00000000, 4 * MB, 0x20000000, 4 * MB, 32,
          qemu=Qemu("mps2-an385", (40, 1)), flash=SEMIHOST_FLASH,
          note="Cortex-M0+ code (ARMv6-M, -mcpu=cortex-m0plus): portable C, soft float; run on QEMU mps2-an385's "
               "Cortex-M3 (QEMU's Cortex-M0 machine, microbit, has 16 KB of RAM)"),
    # virt: DRAM at 0x80000000, where the hart starts with -bios none; program and data in the first 8 MB.
    # QEMU writes RISC-V semihosting's console to stderr unless it is given a character device: stdout here.
    Board("qemu-riscv32", "riscv32", RV32IMAC, 0x80000000, 4 * MB, 0x80400000, 4 * MB, 0,
          qemu=RISCV_VIRT, flash=SEMIHOST_FLASH, toolchain="riscv",
          note="RISC-V rv32imac: portable C, soft float; QEMU virt (qemu-system-riscv32)"),
    Board("qemu-riscv32f", "riscv32", RV32IMAFC, 0x80000000, 4 * MB, 0x80400000, 4 * MB, 0,
          qemu=RISCV_VIRT, flash=SEMIHOST_FLASH, toolchain="riscv",
          note="RISC-V rv32imafc: portable C, the F extension's hard float; QEMU virt (qemu-system-riscv32)"),
    Board("disco_f746ng", "cortex-m7", M7_SP, 0x08000000, 1 * MB, 0x20000000, 320 * 1024, 98,
          pio=PlatformIO("ststm32", "disco_f746ng", "stlink", "ST-LINK/V2-1 on the board's USB"),
          uart_driver="tt_uart_stm32.c", uart="USART1, PA9 TX / PB7 RX: the ST-LINK virtual COM port",
          defines=_stm32(gpio_en=(0x40023830, (0, 1)), usart_en=(0x40023844, 4), tx=(0x40020000, 9),
                         rx=(0x40020400, 7), af=7, usart=0x40011000, clock_hz=16_000_000),  # RM0385: HSI 16 MHz
          flash=Flash("tt_flash_stm32f7.c", 256 * 1024, 4, last_sector=7)),  # sectors 5-7: 256 KB (RM0385 3.3.1)
    Board("nucleo_f767zi", "cortex-m7", M7_DP, 0x08000000, 2 * MB, 0x20000000, 512 * 1024, 110,
          pio=PlatformIO("ststm32", "nucleo_f767zi", "stlink", "ST-LINK/V2-1 on the board's USB"),
          uart_driver="tt_uart_stm32.c", uart="USART3, PD8 TX / PD9 RX: the ST-LINK virtual COM port",
          defines=_stm32(gpio_en=(0x40023830, (3,)), usart_en=(0x40023840, 18), tx=(0x40020C00, 8),
                         rx=(0x40020C00, 9), af=7, usart=0x40004800, clock_hz=16_000_000),  # RM0410: HSI 16 MHz
          flash=Flash("tt_flash_stm32f7.c", 256 * 1024, 4, last_sector=11)),  # single bank: 5-11 256 KB (RM0410 3.3.1)
    # The Arduino bootloader keeps the first 64 KB of flash; the application starts at 0x10000.
    Board("nano33ble", "cortex-m4", M4F, 0x00010000, 1 * MB - 0x10000, 0x20000000, 256 * 1024, 48,
          pio=PlatformIO("nordicnrf52", "nano33ble", None,
                         "the Arduino bootloader (double-tap reset, then upload with bossac)"),
          uart_driver="tt_uart_nrf52840.c",
          uart="UART0 on D1 (P1.03) TX / D0 (P1.10) RX: a 3.3 V USB-serial adapter, not the board's USB",
          flash=Flash("tt_flash_nrf52840.c", 4096, 4, last_sector=255)),  # 256 pages of 4 KB
    # STM32F405 (Netduino Plus 2), as QEMU's netduinoplus2 emulates it: 1 MB flash at 0x08000000, 128 KB SRAM at
    # 0x20000000 (SRAM1 + SRAM2; the 64 KB CCM at 0x10000000 is left alone; QEMU maps 192 KB there, the chip has
    # 128 KB), 82 interrupts (RM0090 12.2). QEMU connects its first -serial to USART1 (hw/arm/stm32f405_soc.c) and
    # emulates no flash controller: no persistent state.
    Board("netduinoplus2", "cortex-m4", M4F, 0x08000000, 1 * MB, 0x20000000, 128 * 1024, 82,
          uart_driver="tt_uart_stm32f4.c", uart="USART1, PA9 TX / PA10 RX (AF7)", defines=(("TT_STM32_USART", "1"),),
          emulator="netduinoplus2"),
    # The MPS2 AN385 FPGA image (Cortex-M3) as QEMU's mps2-an385 emulates it, flashed and talked to over UART0
    # (CMSDK APB UART, 25 MHz peripheral clock) on QEMU's first -serial: `tinytrain stream` on a core without DSP or
    # FPU. Code SRAM at 0 (where the core boots), 4 MB of data SRAM at 0x20000000; no flash controller.
    Board("mps2-an385", "cortex-m3", M3, 0x00000000, 4 * MB, 0x20000000, 4 * MB, 32,
          uart_driver="tt_uart_cmsdk.c", uart="UART0 (CMSDK APB UART at 0x40004000)",
          defines=(("TT_CMSDK_UART", "0x40004000u"), ("TT_CMSDK_CLOCK_HZ", "25000000u")), emulator="mps2-an385",
          note="Cortex-M3 over a UART: the serial harness on QEMU mps2-an385, for `tinytrain stream`"),
    # NUCLEO-U575ZI-Q (STM32U575ZI, Cortex-M33 with DSP and FPU, TrustZone off as shipped): 2 MB of flash, SRAM1-3
    # contiguous at 0x20000000 (192 + 64 + 512 KB; RM0456 2.3.2); USART1 on the ST-LINK virtual COM port; 4 MHz MSIS
    # after reset. The non-secure peripheral aliases (RCC 0x46020C00, GPIOA 0x42020000, USART1 0x40013800).
    Board("nucleo_u575zi_q", "cortex-m33", M33F, 0x08000000, 2 * MB, 0x20000000, 768 * 1024, 141,
          pio=PlatformIO("ststm32", "nucleo_u575zi_q", "stlink", "ST-LINK/V3 on the board's USB"),
          uart_driver="tt_uart_stm32.c", uart="USART1, PA9 TX / PA10 RX (AF7): the ST-LINK virtual COM port",
          defines=_stm32(gpio_en=(0x46020C8C, (0,)), usart_en=(0x46020CA4, 14), tx=(0x42020000, 9),
                         rx=(0x42020000, 10), af=7, usart=0x40013800, clock_hz=4_000_000),
          note="Cortex-M33 board: STM32U575, DSP and FPv5-SP"),
    # NUCLEO-G071RB (STM32G071RB, Cortex-M0+): 128 KB of flash, 36 KB of SRAM (RM0444 2.2): a 36 KB budget at most;
    # USART2 on the ST-LINK virtual COM port; HSI16 after reset.
    Board("nucleo_g071rb", "cortex-m0plus", M0PLUS, 0x08000000, 128 * 1024, 0x20000000, 36 * 1024, 32,
          pio=PlatformIO("ststm32", "nucleo_g071rb", "stlink", "ST-LINK/V2-1 on the board's USB"),
          uart_driver="tt_uart_stm32.c", uart="USART2, PA2 TX / PA3 RX (AF1): the ST-LINK virtual COM port",
          defines=_stm32(gpio_en=(0x40021034, (0,)), usart_en=(0x4002103C, 17), tx=(0x50000000, 2),
                         rx=(0x50000000, 3), af=1, usart=0x40004400, clock_hz=16_000_000),
          note="Cortex-M0+ board: STM32G071, 36 KB of SRAM (small models only)"),
    # Sipeed Longan Nano (GD32VF103CBT6, RISC-V rv32imac Bumblebee core): 128 KB of flash at 0x08000000 (where the core
    # starts), 32 KB of SRAM; USART0 on the header's T0 / R0 pins; IRC8M 8 MHz after reset. Built with the Debian
    # riscv64-unknown-elf-gcc + picolibc (make) or PlatformIO's gd32v toolchain + newlib (pio run).
    Board("sipeed-longan-nano", "riscv32", RV32IMAC, 0x08000000, 128 * 1024, 0x20000000, 32 * 1024, 0,
          pio=PlatformIO("gd32v", "sipeed-longan-nano", "dfu", "the GD32's USB DFU bootloader (hold BOOT0, reset)"),
          uart_driver="tt_uart_gd32vf103.c", uart="USART0, PA9 TX / PA10 RX: a 3.3 V USB-serial adapter",
          toolchain="riscv", note="RISC-V board: GD32VF103, rv32imac, 32 KB of SRAM (small models only)"),
)}


def get_board(name: str) -> Board:
    if name not in BOARDS:
        raise UsageError(f"unknown board {name!r}; known: {', '.join(BOARDS)}")
    return BOARDS[name]
