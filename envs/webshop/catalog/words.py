"""Word banks of the procedural WebShop catalogue: product types of WebShop's five categories and their vocabulary.

Each `ProductType` says where a product sits (category, search query, `›` category path) and what its title,
attributes, options and price look like. Title words are split by part of speech so the generator knows a title's
nouns (for the reward's type factor) without a tagger: `adjectives` are not nouns; `materials`, `heads` and `uses`
are. Attribute phrases are the short lower-case phrases WebShop's instructions ask for ("machine wash",
"gluten free"); option pools are sampled per product.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    """A kind of product: where it is listed, and the word pools of its titles, attributes, options and price."""

    category: str  # one of WebShop's five: beauty, electronics, fashion, garden, grocery
    query: str  # the search query the product was listed under (lower case)
    path: str  # `›`-separated product category
    heads: tuple[str, ...]  # the product noun phrase ("Maxi Dress")
    materials: tuple[str, ...]  # noun modifiers ("Chiffon")
    adjectives: tuple[str, ...]  # non-noun modifiers ("Sleeveless")
    uses: tuple[str, ...]  # "for {use}" suffixes, nouns ("Party")
    attributes: tuple[str, ...]  # attribute phrases
    options: tuple[tuple[str, tuple[str, ...]], ...]  # option name -> value pool
    price: tuple[float, float]  # typical price range in dollars


APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12")
COLORS = (
    "black", "white", "navy blue", "light blue", "red", "wine red", "pink", "grey", "heather grey", "washed black",
    "army green", "khaki", "brown", "beige", "purple", "yellow", "dark green", "apricot", "coffee", "multicolor",
)  # fmt: skip
WOOD_COLORS = ("walnut", "oak", "white", "black", "grey", "espresso", "natural", "rustic brown")
PACKS = (
    "1 count (pack of 1)",
    "2 count (pack of 2)",
    "3 count (pack of 3)",
    "6 count (pack of 6)",
    "12 count (pack of 12)",
)
FLAVORS = (
    "original",
    "chocolate",
    "vanilla",
    "strawberry",
    "sea salt",
    "peanut butter",
    "honey",
    "variety pack",
    "mango",
)
SCENTS = ("unscented", "lavender", "rose", "coconut", "citrus", "eucalyptus", "vanilla", "sandalwood")

GENERIC_ADJECTIVES = (
    "Premium", "Classic", "Modern", "Portable", "Lightweight", "Durable", "Compact", "Deluxe", "Elegant", "Soft",
    "Upgraded", "Professional", "Vintage", "Adjustable", "Reusable", "Large", "Mini", "Ultra", "Simple", "Luxury",
)  # fmt: skip
BRAND_SYLLABLES = (
    "ar", "bel", "cor", "da", "el", "fin", "gro", "ha", "ix", "jo", "ka", "lum", "mo", "nor", "ov", "pra", "qui",
    "ro", "sol", "ta", "ul", "vex", "wen", "yo", "zan", "tri", "ley", "mar", "pix", "zen",
)  # fmt: skip

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # fashion
    ProductType("fashion", "women's dresses", "Clothing, Shoes & Jewelry › Women › Clothing › Dresses",
                ("Dress", "Maxi Dress", "Midi Dress", "Bodycon Dress", "Shirt Dress"), ("Chiffon", "Lace", "Cotton", "Satin", "Floral Print"),
                ("Sleeveless", "Casual", "Elegant", "Wrap", "Summer"), ("Women", "Party", "Wedding Guest", "Beach"),
                ("machine wash", "hand wash", "polyester spandex", "short sleeve", "long sleeve", "daily wear", "button closure", "elastic waist"),
                (("size", APPAREL_SIZES), ("color", COLORS)), (15, 60)),
    ProductType("fashion", "men's t-shirts", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
                ("T-Shirt", "Tee", "Henley Shirt", "Crewneck Tee"), ("Cotton", "Graphic", "Jersey", "Heather"),
                ("Short Sleeve", "Slim Fit", "Casual", "Athletic", "Vintage"), ("Men", "Workout", "Gym"),
                ("machine wash", "cotton jersey", "classic fit", "short sleeve", "moisture wicking", "needle sleeve", "wash cold", "quick drying"),
                (("size", APPAREL_SIZES), ("color", COLORS)), (9, 35)),
    ProductType("fashion", "women's sneakers", "Clothing, Shoes & Jewelry › Women › Shoes › Fashion Sneakers",
                ("Sneakers", "Walking Shoes", "Running Shoes", "Slip On Shoes"), ("Mesh", "Canvas", "Leather", "Knit"),
                ("Breathable", "Lightweight", "Non Slip", "Casual", "Comfortable"), ("Women", "Walking", "Travel"),
                ("rubber sole", "non slip", "arch support", "memory foam", "lace up", "breathable mesh", "slip resistant"),
                (("size", SHOE_SIZES), ("color", COLORS)), (25, 90)),
    ProductType("fashion", "men's shorts", "Clothing, Shoes & Jewelry › Men › Clothing › Shorts",
                ("Shorts", "Cargo Shorts", "Board Shorts", "Athletic Shorts"), ("Cotton", "Twill", "Nylon", "Denim"),
                ("Relaxed Fit", "Quick Dry", "Casual", "Stretch", "Classic"), ("Men", "Running", "Hiking", "Beach"),
                ("elastic waistband", "drawstring closure", "quick drying", "machine wash", "zipper pockets", "relaxed fit"),
                (("size", APPAREL_SIZES), ("color", COLORS)), (15, 45)),
    ProductType("fashion", "women's jewelry", "Clothing, Shoes & Jewelry › Women › Jewelry › Necklaces",
                ("Necklace", "Pendant Necklace", "Choker", "Earrings Set"), ("Sterling Silver", "Gold", "Pearl", "Crystal"),
                ("Dainty", "Elegant", "Minimalist", "Layered", "Handmade"), ("Women", "Girls", "Anniversary"),
                ("sterling silver", "hypoallergenic", "gift box", "gold plated", "nickel free", "adjustable chain"),
                (("color", ("silver", "gold", "rose gold")),), (12, 80)),
    ProductType("fashion", "men's hoodies & sweatshirts", "Clothing, Shoes & Jewelry › Men › Clothing › Fashion Hoodies & Sweatshirts",
                ("Hoodie", "Pullover Hoodie", "Sweatshirt", "Zip Hoodie"), ("Fleece", "Cotton", "Sherpa", "Thermal"),
                ("Heavyweight", "Casual", "Warm", "Oversized", "Athletic"), ("Men", "Winter", "Workout"),
                ("long sleeve", "machine wash", "fleece lined", "kangaroo pocket", "drawstring closure", "officially licensed"),
                (("size", APPAREL_SIZES), ("color", COLORS)), (20, 65)),
    # beauty
    ProductType("beauty", "face moisturizers", "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers",
                ("Face Moisturizer", "Face Cream", "Night Cream", "Gel Moisturizer"), ("Hyaluronic Acid", "Vitamin C", "Retinol", "Aloe Vera"),
                ("Hydrating", "Anti Aging", "Oil Free", "Lightweight", "Soothing"), ("Face", "Dry Skin", "Sensitive Skin"),
                ("hyaluronic acid", "cruelty free", "paraben free", "fragrance free", "dry skin", "natural ingredients", "anti aging"),
                (("size", ("1.7 ounce", "2 ounce", "3.4 fl oz (pack of 1)")),), (8, 45)),
    ProductType("beauty", "shampoo & conditioner", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
                ("Shampoo", "Conditioner", "Shampoo and Conditioner Set"), ("Argan Oil", "Tea Tree", "Biotin", "Coconut Oil"),
                ("Sulfate Free", "Moisturizing", "Volumizing", "Clarifying", "Gentle"), ("Hair Growth", "Dry Hair", "Curly Hair"),
                ("sulfate free", "paraben free", "hair growth", "dry hair", "natural ingredients", "tea tree", "argan oil", "color safe"),
                (("scent", SCENTS), ("size", ("8 fl oz", "16 fl oz", "32 fl oz"))), (7, 30)),
    ProductType("beauty", "makeup brushes", "Beauty & Personal Care › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
                ("Makeup Brush Set", "Foundation Brush", "Eyeshadow Brushes", "Kabuki Brush"), ("Synthetic Bristle", "Bamboo", "Marble"),
                ("Professional", "Soft", "Travel", "Vegan", "Dense"), ("Foundation", "Blending", "Powder"),
                ("synthetic hair", "cruelty free", "travel case", "easy clean", "high quality", "storage bag"),
                (("color", ("black", "rose gold", "pink", "white", "purple")),), (9, 35)),
    ProductType("beauty", "nail polish", "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
                ("Nail Polish", "Gel Nail Polish Set", "Nail Lacquer", "Top Coat"), ("Glitter", "Gel", "Chrome"),
                ("Long Lasting", "Quick Dry", "Non Toxic", "Glossy", "Matte"), ("Nail Art", "Manicure", "Salon"),
                ("long lasting", "non toxic", "nail art", "quick dry", "easy apply", "gel polish"),
                (("color", ("red", "nude", "pink", "coral", "burgundy", "clear", "glitter gold", "lilac")),), (5, 25)),
    ProductType("beauty", "body wash", "Beauty & Personal Care › Personal Care › Bath & Bathing Accessories › Body Washes",
                ("Body Wash", "Shower Gel", "Body Scrub", "Bath Soap Bar"), ("Shea Butter", "Oatmeal", "Charcoal", "Sea Salt"),
                ("Exfoliating", "Moisturizing", "Gentle", "Refreshing", "Natural"), ("Body", "Men", "Sensitive Skin"),
                ("natural ingredients", "sensitive skin", "essential oils", "paraben free", "dead skin", "cruelty free"),
                (("scent", SCENTS), ("size", ("12 fl oz", "18 fl oz", "2 pack"))), (6, 28)),
    ProductType("beauty", "hair extensions", "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
                ("Hair Extensions", "Clip In Hair Extensions", "Ponytail Extension", "Wig"), ("Human Hair", "Synthetic Fiber", "Remy Hair"),
                ("Straight", "Wavy", "Natural Looking", "Thick", "Seamless"), ("Women", "Daily Use", "Cosplay"),
                ("natural looking", "human hair", "easy apply", "high quality", "heat resistant", "long lasting"),
                (("color", ("natural black", "dark brown", "light brown", "blonde", "ombre")), ("size", ("14 inch", "18 inch", "22 inch"))), (20, 120)),
    # electronics
    ProductType("electronics", "hdmi cables", "Electronics › Accessories & Supplies › Audio & Video Accessories › Cables › HDMI Cables",
                ("HDMI Cable", "HDMI Adapter", "HDMI Switch"), ("Braided Nylon", "Gold Plated", "Fiber Optic"),
                ("High Speed", "4K", "Flexible", "Ultra Slim", "Durable"), ("TV", "Monitor", "Gaming Console"),
                ("high speed", "gold plated", "4k ultra hd", "plug play", "ethernet channel", "braided cable"),
                (("size", ("3 ft", "6 ft", "10 ft", "15 ft", "25 ft")), ("color", ("black", "grey", "white"))), (6, 30)),
    ProductType("electronics", "bluetooth headphones", "Electronics › Headphones, Earbuds & Accessories › Headphones › Over-Ear Headphones",
                ("Headphones", "Wireless Earbuds", "Headset", "Sports Earphones"), ("Bluetooth", "Noise Cancelling", "Bass"),
                ("Wireless", "Foldable", "Waterproof", "Lightweight", "Over Ear"), ("Travel", "Workout", "Office"),
                ("noise cancelling", "wireless bluetooth", "long battery", "hands free", "built in microphone", "carrying case"),
                (("color", ("black", "white", "blue", "rose gold", "grey")),), (18, 150)),
    ProductType("electronics", "security cameras", "Electronics › Camera & Photo › Video Surveillance › Surveillance Cameras",
                ("Security Camera", "Doorbell Camera", "Baby Monitor", "Dome Camera"), ("WiFi", "Solar", "Night Vision"),
                ("Wireless", "Outdoor", "Indoor", "Smart", "Weatherproof"), ("Home Security", "Garage", "Pets"),
                ("night vision", "motion detection", "two way audio", "easy install", "high definition", "cloud storage"),
                (("style", ("1 camera", "2 cameras", "4 cameras")),), (25, 180)),
    ProductType("electronics", "phone cases", "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
                ("Phone Case", "Wallet Case", "Bumper Case", "Clear Case"), ("Silicone", "Leather", "TPU", "Carbon Fiber"),
                ("Shockproof", "Slim", "Protective", "Magnetic", "Clear"), ("iPhone", "Galaxy", "Pixel"),
                ("shock absorbing", "wireless charging", "card holder", "screen protector", "drop protection", "raised bezels"),
                (("color", COLORS[:10]), ("size", ("6.1 inch", "6.7 inch", "5.8 inch"))), (7, 30)),
    ProductType("electronics", "tablet accessories", "Electronics › Computers & Accessories › Tablet Accessories › Stands",
                ("Tablet Stand", "Keyboard Case", "Stylus Pen", "Tablet Sleeve"), ("Aluminum", "Leather", "Felt"),
                ("Adjustable", "Foldable", "Portable", "Rotating", "Ergonomic"), ("Desk", "Kitchen", "Kids"),
                ("aluminum alloy", "easy carry", "non slip", "long battery", "compatible ipad", "height adjustable"),
                (("color", ("silver", "space grey", "black", "rose gold")),), (12, 70)),
    ProductType("electronics", "vcrs", "Electronics › Television & Video › VCRs & DVD Players",
                ("DVD Player", "VCR Combo", "Blu-ray Player", "Media Player"), ("HDMI", "USB", "Region Free"),
                ("Compact", "Remote Controlled", "Upscaling", "Portable", "Classic"), ("TV", "Car", "Home Theater"),
                ("remote control", "high definition", "usb port", "region free", "easy use", "hdmi output"),
                (("style", ("player only", "with hdmi cable", "with remote")),), (30, 160)),
    # garden (home & kitchen)
    ProductType("garden", "console tables", "Home & Kitchen › Furniture › Living Room Furniture › Tables › Sofa & Console Tables",
                ("Console Table", "Sofa Table", "Entryway Table", "Hallway Table"), ("Wood", "Metal", "Glass", "Marble"),
                ("Rustic", "Industrial", "Narrow", "Modern", "Farmhouse"), ("Living Room", "Entryway", "Hallway"),
                ("solid wood", "metal legs", "storage shelf", "easy assembly", "living room", "engineered wood"),
                (("color", WOOD_COLORS),), (60, 420)),
    ProductType("garden", "throw blankets", "Home & Kitchen › Bedding › Blankets & Throws › Throws",
                ("Throw Blanket", "Fleece Blanket", "Weighted Blanket", "Knit Throw"), ("Flannel", "Sherpa", "Cotton", "Microfiber"),
                ("Cozy", "Soft", "Warm", "Lightweight", "Plush"), ("Couch", "Bed", "Sofa"),
                ("super soft", "machine washable", "fleece throw", "living room", "all season", "fade resistant"),
                (("color", COLORS[:12]), ("size", ("50x60 inch", "60x80 inch", "90x90 inch"))), (15, 70)),
    ProductType("garden", "wall art", "Home & Kitchen › Wall Art › Posters & Prints",
                ("Canvas Wall Art", "Framed Print", "Poster", "Wall Decor"), ("Canvas", "Abstract", "Landscape", "Botanical"),
                ("Framed", "Modern", "Large", "Minimalist", "Vintage"), ("Living Room", "Bedroom", "Office"),
                ("ready hang", "living room", "wood frame", "high definition", "wall decor", "dining room"),
                (("size", ("12x16 inch", "16x24 inch", "24x36 inch")),), (18, 120)),
    ProductType("garden", "window coverings", "Home & Kitchen › Home Décor › Window Treatments › Curtains & Drapes",
                ("Curtains", "Blackout Curtains", "Sheer Curtains", "Roman Shades"), ("Linen", "Velvet", "Polyester", "Voile"),
                ("Thermal", "Insulated", "Room Darkening", "Grommet", "Sheer"), ("Bedroom", "Living Room", "Nursery"),
                ("blackout curtains", "thermal insulated", "living room", "machine washable", "noise reducing", "grommet top"),
                (("color", COLORS[:12]), ("size", ("42x63 inch", "52x84 inch", "52x95 inch"))), (14, 60)),
    ProductType("garden", "mattresses", "Home & Kitchen › Furniture › Bedroom Furniture › Mattresses & Box Springs › Mattresses",
                ("Mattress", "Memory Foam Mattress", "Hybrid Mattress", "Mattress Topper"), ("Memory Foam", "Gel", "Latex", "Pocket Spring"),
                ("Medium Firm", "Cooling", "Plush", "Orthopedic", "Breathable"), ("Bed", "Back Pain", "Guest Room"),
                ("memory foam", "medium firm", "pressure relief", "certipur us", "easy setup", "pocket springs"),
                (("size", ("twin", "full", "queen", "king", "california king")),), (120, 700)),
    ProductType("garden", "kitchen storage", "Home & Kitchen › Kitchen & Dining › Storage & Organization › Food Storage",
                ("Food Storage Containers", "Canister Set", "Spice Rack", "Bread Box"), ("Glass", "Bamboo", "Stainless Steel", "Plastic"),
                ("Airtight", "Stackable", "Leak Proof", "Reusable", "Compact"), ("Kitchen", "Pantry", "Meal Prep"),
                ("bpa free", "dishwasher safe", "stainless steel", "easy clean", "space saving", "microwave safe"),
                (("size", ("5 piece", "10 piece", "24 piece")),), (12, 60)),
    # grocery
    ProductType("grocery", "granola & nutrition bars", "Grocery & Gourmet Food › Snacks & Sweets › Granola & Nutrition Bars",
                ("Protein Bars", "Granola Bars", "Snack Bars", "Energy Bars"), ("Almond", "Oat", "Peanut", "Cashew"),
                ("Chewy", "Crunchy", "Keto", "Organic", "Plant Based"), ("Snacking", "Breakfast", "Kids"),
                ("gluten free", "low sugar", "high protein", "non gmo", "low carb", "dairy free", "simple ingredients"),
                (("flavor name", FLAVORS), ("size", PACKS)), (10, 45)),
    ProductType("grocery", "coffee", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
                ("Ground Coffee", "Coffee Beans", "Coffee Pods", "Instant Coffee"), ("Arabica", "Espresso", "Colombian", "Cold Brew"),
                ("Medium Roast", "Dark Roast", "Organic", "Smooth", "Bold"), ("Drip", "Espresso Machine", "French Press"),
                ("medium roast", "dark roast", "fair trade", "usda organic", "single origin", "whole bean"),
                (("flavor name", ("original", "hazelnut", "vanilla", "mocha", "caramel")), ("size", ("12 ounce", "2 pound", "pack of 3"))), (8, 40)),
    ProductType("grocery", "meat & seafood", "Grocery & Gourmet Food › Meat & Seafood › Jerky & Dried Meats",
                ("Beef Jerky", "Turkey Jerky", "Meat Sticks", "Salmon Jerky"), ("Beef", "Turkey", "Salmon", "Pork"),
                ("Smoked", "Spicy", "Tender", "Original", "Grass Fed"), ("Snacking", "Hiking", "Road Trips"),
                ("high protein", "gluten free", "grass fed", "low fat", "ready eat", "individually wrapped"),
                (("flavor name", ("original", "teriyaki", "peppered", "sweet and spicy", "hickory smoked")), ("size", PACKS)), (8, 50)),
    ProductType("grocery", "herbal tea", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
                ("Herbal Tea", "Green Tea", "Tea Bags", "Loose Leaf Tea"), ("Chamomile", "Peppermint", "Ginger", "Hibiscus"),
                ("Caffeine Free", "Organic", "Soothing", "Detox", "Relaxing"), ("Sleep", "Digestion", "Morning"),
                ("caffeine free", "usda organic", "non gmo", "gluten free", "individually wrapped", "kosher certified"),
                (("flavor name", ("chamomile", "peppermint", "lemon ginger", "hibiscus", "variety pack")), ("size", ("20 count", "40 count", "100 count"))), (5, 25)),
    ProductType("grocery", "candy & chocolate", "Grocery & Gourmet Food › Snacks & Sweets › Candy & Chocolate",
                ("Chocolate Bar", "Gummy Candy", "Chocolate Truffles", "Hard Candy"), ("Dark Chocolate", "Milk Chocolate", "Fruit", "Caramel"),
                ("Assorted", "Sugar Free", "Gourmet", "Vegan", "Bite Size"), ("Gifts", "Parties", "Holidays"),
                ("gluten free", "sugar free", "individually wrapped", "gift box", "dairy free", "non gmo"),
                (("flavor name", ("dark chocolate", "milk chocolate", "assorted", "sea salt caramel", "mint")), ("size", PACKS)), (6, 40)),
)  # fmt: skip
