from _typeshed import ReadableBuffer

def crc32(data: ReadableBuffer, value: int = 0, /) -> int: ...

WIDE: bool
