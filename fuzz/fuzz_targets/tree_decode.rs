//! Stored tree objects: any bytes decode to a tree or an error, never a panic, and a
//! tree that decodes re-encodes to bytes that decode to the same tree.
#![no_main]

use agentvfs::store::objects::Tree;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(tree) = Tree::decode(data) {
        let again = Tree::decode(&tree.encode()).expect("a re-encoded tree decodes");
        assert!(again == tree, "re-encoded tree differs");
        let _ = Tree::hash_of(data);
    }
});
