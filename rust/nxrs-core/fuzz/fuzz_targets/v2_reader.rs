//! The v2 reader on arbitrary bytes, in both verification modes: must never panic, and what it
//! accepts must be readable to the end.
//!
//! Each input is read twice: as it is, and with its header CRC-32C recomputed, so that mutations
//! of the JSON reach the validation behind the checksum instead of all stopping at it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nxrs_core::checkpoint;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify, PRELUDE_LEN};
use nxrs_core::nxck::Format;

fn read(bytes: Vec<u8>) {
    for verify in [Verify::HeaderOnly, Verify::Full] {
        let Ok(ck) = Checkpoint::from_bytes(FileBytes::from_vec(bytes.clone()), verify) else {
            continue;
        };
        let verified = ck.verify_all().is_ok();
        for t in ck.tensors() {
            assert_eq!(ck.data(t).len(), t.nbytes);
        }
        for t in ck.tensors() {
            assert_eq!(ck.cells(t).len(), t.cells());
        }
        // The model's checks (configuration, tensors, scalars) on whatever the format accepted.
        if let Ok(trainer) = checkpoint::trainer_from(&ck, Verify::HeaderOnly) {
            // A file that is a trainer's encodes again, and reads back as the same trainer.
            let bytes = checkpoint::encode(&trainer, Format::V2).unwrap();
            let again = Checkpoint::from_bytes(FileBytes::from_vec(bytes), Verify::Full).unwrap();
            let back = checkpoint::trainer_from(&again, Verify::Full).unwrap();
            assert_eq!(back.config(), trainer.config());
            assert_eq!(back.state(), trainer.state());
        }
        if !verified {
            assert!(checkpoint::trainer_from(&ck, Verify::Full).is_err());
        }
    }
}

/// The bytes with a correct header CRC-32C, when the prelude's header_len fits the input.
fn with_header_crc_fixed(data: &[u8]) -> Option<Vec<u8>> {
    let header_len = u32::from_le_bytes(data.get(12..16)?.try_into().ok()?) as usize;
    let json = data.get(PRELUDE_LEN..PRELUDE_LEN.checked_add(header_len)?)?;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&data[..28]), json);
    let mut fixed = data.to_vec();
    fixed[28..32].copy_from_slice(&crc.to_le_bytes());
    Some(fixed)
}

fuzz_target!(|data: &[u8]| {
    read(data.to_vec());
    if let Some(fixed) = with_header_crc_fixed(data) {
        read(fixed);
    }
});
