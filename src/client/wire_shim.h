/* The wire module's type `fx_publish_batch` (binary.h) collides with the
 * public function fx_publish_batch() of felix.h. Client files include the
 * wire headers through here, where the type is renamed fx_wire_batch for
 * this translation unit only (types do not reach the linker). Any thread. */
#ifndef FX_CLIENT_WIRE_SHIM_H
#define FX_CLIENT_WIRE_SHIM_H

#define fx_publish_batch fx_wire_batch
#include "wire/binary.h"
#undef fx_publish_batch

#include "wire/frame.h"
#include "wire/message.h"

#endif
